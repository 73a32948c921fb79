//! Judges of chapter 10's exercises.

use super::{Section, Verdict, attempt, compare, note, random};
use crate::solutions::ch10_matmul::{self as solution, MR, NR};
use llm_workbook::matmul::Op;
use nalgebra::DMatrix;
use std::ops::Range;

const KERNEL: Section =
    Section { chapter: "ch10_matmul", anchor: "5-the-micro-kernel-and-its-register-tile" };

/// Random slivers of depth 1, 3 and 7 against the product of the unpacked matrices, with β = 0
/// over a NaN-filled C, and with α = 2, β = 0.5 over a random C.
fn micro_kernel_checks(f: impl Fn(usize, &[f64], &[f64], f64, f64, &mut DMatrix<f64>)) -> Verdict {
    // The tile is MR×NR by design: no other shape to try.
    super::not_applicable(&[
        super::Probe::Scale,
        super::Probe::Batch,
        super::Probe::Order,
        super::Probe::Errors,
    ]);
    super::probe(super::Probe::Named);
    for (seed, kc) in [(150, 1), (151, 3), (152, 7)] {
        let (a, b) = (random(seed, MR * kc, 1), random(seed + 10, kc * NR, 1));
        for (alpha, beta) in [(1.0, 0.0), (2.0, 0.5)] {
            let start = if beta == 0.0 {
                DMatrix::from_element(MR, NR, f64::NAN)
            } else {
                random(seed + 20, MR, NR)
            };
            let mut c = start.clone();
            super::passing(&[("a", &a.as_slice()), ("b", &b.as_slice()), ("c", &c)]);
            attempt(KERNEL, "micro_kernel", || {
                f(kc, a.as_slice(), b.as_slice(), alpha, beta, &mut c)
            })?;
            let mut want = start.clone();
            solution::micro_kernel(kc, a.as_slice(), b.as_slice(), alpha, beta, &mut want);
            if beta == 0.0 && c.iter().any(|v| v.is_nan()) {
                return Err(KERNEL.fail(
                    "with β = 0 your C holds NaN: C may be uninitialised, \
                     do not read it when β = 0",
                ));
            }
            let mut row_major = start.clone();
            // Ã misread as A stored row by row (A[i, p] = Ã[i·kc + p]), repacked for the reference.
            let a_packed: Vec<f64> =
                (0..kc * MR).map(|n| a.as_slice()[(n % MR) * kc + n / MR]).collect();
            solution::micro_kernel(kc, &a_packed, b.as_slice(), alpha, beta, &mut row_major);
            let what = format!("kc = {kc}, α = {alpha}, β = {beta}: C");
            compare(KERNEL, &what, &c, &want, 1e-12, &[]).map_err(|m| {
                if kc > 1 && c.shape() == row_major.shape() && (&c - &row_major).abs().max() < 1e-12
                {
                    KERNEL.fail(format!(
                        "{what}: you read Ã row by row; the packed sliver stores kc columns of MR \
                         values: A[i, p] = Ã[p·MR + i]"
                    ))
                } else {
                    m
                }
            })?;
        }
    }
    Ok(())
}

const PACKING: Section = Section { chapter: "ch10_matmul", anchor: "4-packing" };

type Pack<'a> = &'a dyn Fn(
    &DMatrix<f64>,
    Op,
    Range<usize>,
    Range<usize>,
    usize,
) -> llm_workbook::Result<Vec<f64>>;

/// Which operand a packing judge grades: A (slivers of rows) or B (slivers of columns).
#[derive(Clone, Copy)]
struct Side {
    name: &'static str,
    x: &'static str,
    width: &'static str,
    /// What the slivers cut: "rows" of op(A), "columns" of op(B).
    cut: &'static str,
}

const A_SIDE: Side = Side { name: "pack_a_block", x: "A", width: "mr", cut: "rows" };
const B_SIDE: Side = Side { name: "pack_b_panel", x: "B", width: "nr", cut: "columns" };

/// One packing case: `outer` is the range the slivers cut (rows of op(A), columns of op(B)) and
/// `depth` the other; the arguments go to `f` in the order of its signature.
#[allow(clippy::too_many_arguments)]
fn pack_case(
    side: Side,
    f: Pack,
    reference: Pack,
    m: &DMatrix<f64>,
    op: Op,
    outer: Range<usize>,
    depth: Range<usize>,
    width: usize,
) -> Verdict {
    let call = |g: Pack, o: Op, outer: Range<usize>, depth: Range<usize>| {
        if side.cut == "rows" { g(m, o, outer, depth, width) } else { g(m, o, depth, outer, width) }
    };
    let want = call(reference, op, outer.clone(), depth.clone()).map_err(|e| e.to_string())?;
    let (len, kc) = (outer.len(), depth.len());
    super::passing(&[(side.x, m)]);
    let yours = match attempt(PACKING, side.name, || call(f, op, outer.clone(), depth.clone()))? {
        Ok(v) => v,
        Err(e) if op == Op::T => {
            return Err(PACKING.fail(format!(
                "your {} returned an error for a valid block of op({x}) = {x}ᵀ ({} rows × {} \
                 columns of the stored {x}): {e} — the ranges are rows and columns of op({x}): \
                 read op({x}), element (i, j) of {x}ᵀ is {x}[j, i]",
                side.name,
                m.ncols(),
                m.nrows(),
                x = side.x
            )));
        }
        Err(e) => {
            return Err(
                PACKING.fail(format!("your {} returned an error on a valid block: {e}", side.name))
            );
        }
    };
    let case = format!(
        "op({x}) = {x}{t} ({} stored), {cut} {outer:?}, depth {depth:?}, {w} = {width}",
        if op == Op::T { "a transposed" } else { "as" },
        x = side.x,
        t = if op == Op::T { "ᵀ" } else { "" },
        cut = side.cut,
        w = side.width,
    );
    if yours.len() != want.len() {
        return Err(PACKING.fail(format!(
            "{case}: the packed form should hold ⌈{len}/{width}⌉·{width}·{kc} = {} values (whole \
             slivers, the last zero-padded); yours has {}",
            want.len(),
            yours.len()
        )));
    }
    let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x == y);
    if same(&yours, &want) {
        return Ok(());
    }
    // A common slip, if one explains it.
    let by_rows: Vec<f64> = (0..want.len())
        .map(|n| {
            let (q, r) = (n / (kc * width), n % (kc * width));
            want[q * kc * width + (r % kc) * width + r / kc]
        })
        .collect();
    let why = if same(&yours, &by_rows) {
        format!(
            " — you wrote each sliver line by line: a sliver is {kc} groups of {width} values, \
             one group per step p of the depth (p outer, the {width} {} inner)",
            side.cut
        )
    } else if call(reference, if op == Op::T { Op::N } else { Op::T }, outer.clone(), depth.clone())
        .is_ok_and(|other| same(&yours, &other))
    {
        format!(" — you packed the other one of {x} and {x}ᵀ: read op({x})", x = side.x)
    } else if call(reference, op, 0..len, 0..kc).is_ok_and(|origin| same(&yours, &origin)) {
        " — you started at row 0 and column 0: the block starts at the ranges' starts".to_string()
    } else {
        String::new()
    };
    let n = (0..want.len()).find(|&n| yours[n] != want[n]).unwrap_or_default();
    let (q, p, i) = (n / (kc * width), (n / width) % kc, n % width);
    let what = if q * width + i >= len {
        format!(
            "0 (padding: line {} is past the block's last {})",
            q * width + i,
            &side.cut[..side.cut.len() - 1]
        )
    } else {
        format!("{}", want[n])
    };
    Err(PACKING.fail(format!(
        "{case}: entry {n} (sliver {q}, depth step {p}, line {i}): yours {}, expected {what}{why}",
        yours[n]
    )))
}

/// The chapter's 5×3 example with MR = 4 (two slivers, 9 of the 24 values padding), as stored
/// and through a transposed matrix; random blocks that start inside the matrix, with edges and
/// padding, both ops, widths 3, 4 and 8; errors for a range outside op(X) and a width of 0.
fn pack_judge(side: Side, f: Pack, reference: Pack) -> Verdict {
    let printed = DMatrix::from_row_slice(
        5,
        3,
        &[1.0, 2.0, 0.0, 0.0, 1.0, 3.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 3.0, 2.0, 1.0],
    );
    let expected = [
        1.0, 0.0, 2.0, 1.0, 2.0, 1.0, 0.0, 1.0, 0.0, 3.0, 1.0, 1.0, 3.0, 0.0, 0.0, 0.0, 2.0, 0.0,
        0.0, 0.0, 1.0, 0.0, 0.0, 0.0,
    ];
    // For B the example is op(B) = printedᵀ (3×5), cut along its 5 columns.
    let (stored, transposed) = if side.cut == "rows" {
        (printed.clone(), printed.transpose())
    } else {
        (printed.transpose(), printed.clone())
    };
    for (m, op) in [(&stored, Op::N), (&transposed, Op::T)] {
        pack_case(side, f, reference, m, op, 0..5, 0..3, 4).map_err(|msg| {
            note(msg, "the chapter prints this example's two slivers value by value")
        })?;
        let want = if side.cut == "rows" {
            reference(m, op, 0..5, 0..3, 4)
        } else {
            reference(m, op, 0..3, 0..5, 4)
        };
        if want.ok().as_deref() != Some(&expected[..]) {
            return Err(PACKING.fail("the crate's packing disagrees with the chapter's example"));
        }
    }
    let m = random(190, 7, 6);
    let cases = [
        (Op::N, 1..7, 2..5, 4),
        (Op::T, 1..6, 1..7, 3),
        (Op::N, 2..4, 0..6, 8),
        (Op::T, 0..6, 3..4, 4),
    ];
    for (op, outer, depth, width) in cases {
        // The operand's shape as the ranges see it: rows of op(X) for A, columns for B.
        let mm = if side.cut == "rows" { m.clone() } else { m.transpose() };
        pack_case(side, f, reference, &mm, op, outer, depth, width)?;
    }
    let bad = [(0..8, 0..3, 4, "a range past the end of op"), (0..3, 0..3, 0, "a width of 0")];
    for (outer, depth, width, what) in bad {
        let mm = if side.cut == "rows" { m.clone() } else { m.transpose() };
        let r = attempt(PACKING, side.name, || {
            if side.cut == "rows" {
                f(&mm, Op::N, outer.clone(), depth.clone(), width)
            } else {
                f(&mm, Op::N, depth.clone(), outer.clone(), width)
            }
        })?;
        super::probe(super::Probe::Errors);
        if r.is_ok() {
            return Err(PACKING.fail(format!("{}: {what}({}) should be an Err", side.name, side.x)));
        }
    }
    Ok(())
}

/// `pack_judge` for Ã, against `llm_workbook::matmul::lab::pack_a_block`.
fn pack_a_block_checks<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, Op, Range<usize>, Range<usize>, usize) -> llm_workbook::Result<Vec<f64>>,
{
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    pack_judge(A_SIDE, &f, &llm_workbook::matmul::lab::pack_a_block::<f64>)
}

/// `pack_judge` for B̃, against `llm_workbook::matmul::lab::pack_b_panel`.
fn pack_b_panel_checks<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, Op, Range<usize>, Range<usize>, usize) -> llm_workbook::Result<Vec<f64>>,
{
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    pack_judge(B_SIDE, &f, &llm_workbook::matmul::lab::pack_b_panel::<f64>)
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Fixed, Gen, Tol, explained, outcome, sweep};

/// One micro-kernel case: (kc, Ã, B̃, α, β, C before).
type KernelCase = (usize, Vec<f64>, Vec<f64>, f64, f64, DMatrix<f64>);

/// **The micro-kernel**: depths 1 to 9 with slivers longer than kc·MR and kc·NR (the packed
/// buffers a kernel is handed run on past its block: the depth is kc, not the slices' length),
/// α and β of both signs, β = 0 over a NaN-filled C, values at 10⁻⁴ to 10³; then
/// `micro_kernel_checks`.
pub fn micro_kernel(f: impl Fn(usize, &[f64], &[f64], f64, f64, &mut DMatrix<f64>)) -> Verdict {
    micro_kernel_judged(&f)
}

/// [`micro_kernel`]'s judge, compiled once here rather than in every test that calls it.
fn micro_kernel_judged(f: &dyn Fn(usize, &[f64], &[f64], f64, f64, &mut DMatrix<f64>)) -> Verdict {
    let mut draw = Gen::new("micro_kernel");
    let mut cases: Vec<KernelCase> = Vec::new();
    for kc in [1, 2, 5, 9] {
        for extra in [0, 3] {
            for (alpha, beta) in [(1.0, 0.0), (2.0, 0.5), (-0.5, 1.0), (1.0, -2.0)] {
                let s = [1.0, 1e-4, 1e3][cases.len() % 3];
                let a = draw.vector(MR * (kc + extra), s).as_slice().to_vec();
                let b = draw.vector(NR * (kc + extra), 1.0).as_slice().to_vec();
                let c = if beta == 0.0 {
                    DMatrix::from_element(MR, NR, f64::NAN)
                } else {
                    draw.matrix(MR, NR, 1.0)
                };
                cases.push((kc, a, b, alpha, beta, c));
            }
        }
    }
    type Kernel<'a> = &'a dyn Fn(usize, &[f64], &[f64], f64, f64, &mut DMatrix<f64>);
    let run = |(kc, a, b, alpha, beta, c): &KernelCase, kernel: Kernel| {
        let mut c = c.clone();
        kernel(*kc, a, b, *alpha, *beta, &mut c);
        Ok(c)
    };
    let found = sweep(
        KERNEL,
        "micro_kernel",
        Tol::F64,
        &cases,
        |c| run(c, &f),
        |c| run(c, &solution::micro_kernel),
    );
    explained(found, || micro_kernel_checks(f))
}

/// One packing case: (the stored matrix, op, the cut's range, the depth's range, the width).
type PackCase = (DMatrix<f64>, Fixed<Op>, (usize, usize), (usize, usize), usize);

/// Packing cases of op(X) with `cut_len` lines along the cut and `depth_len` along the depth:
/// blocks at the corners and inside, single lines, the whole matrix, widths 0 (the promised
/// error) to 6, and ranges one past op(X)'s end (the promised error); a 13×18 matrix gives blocks
/// deeper than 8 steps, where a packing may copy 8 steps of the depth at a time.
fn pack_cases(draw: &mut Gen, cut_rows: bool) -> Vec<PackCase> {
    let mut cases = Vec::new();
    for (r, c) in [(1, 1), (5, 3), (2, 7), (6, 6), (13, 18)] {
        for op in [Op::N, Op::T] {
            // op(X)'s lines along the cut and along the depth.
            let (op_r, op_c) = if op == Op::N { (r, c) } else { (c, r) };
            let (cut, depth) = if cut_rows { (op_r, op_c) } else { (op_c, op_r) };
            let m = draw.matrix(r, c, 1.0);
            for (o, d) in [
                ((0, cut), (0, depth)),
                ((cut - 1, cut), (depth / 2, depth)),
                ((cut / 2, cut), (0, 1)),
                ((0, cut + 1), (0, depth)),
                ((0, cut), (1, depth + 1)),
            ] {
                for w in [0, 1, 2, 4, 5, 6] {
                    cases.push((m.clone(), Fixed(op), o, d, w));
                }
            }
        }
    }
    cases
}

/// The sweep of a packing against the main crate's, exactly (a copy has one right answer).
fn pack_sweep(side: Side, f: Pack, reference: Pack) -> Verdict {
    let cut_rows = side.cut == "rows";
    let cases = pack_cases(&mut Gen::new(side.name), cut_rows);
    let run = |(m, op, o, d, w): &PackCase, g: Pack| {
        let (outer, depth) = (o.0..o.1, d.0..d.1);
        let r = if cut_rows { g(m, op.0, outer, depth, *w) } else { g(m, op.0, depth, outer, *w) };
        outcome(r)
    };
    sweep(PACKING, side.name, Tol::EXACT, &cases, |c| run(c, f), |c| run(c, reference))
}

/// **Packing Ã**: blocks of op(A) at its corners and inside, both ops, widths 0 to 6, blocks
/// deeper than 8 steps, and ranges past op(A)'s end; then `pack_a_block_checks`.
pub fn pack_a_block<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, Op, Range<usize>, Range<usize>, usize) -> llm_workbook::Result<Vec<f64>>,
{
    let found = pack_sweep(A_SIDE, &f, &llm_workbook::matmul::lab::pack_a_block::<f64>);
    explained(found, || pack_a_block_checks(&f))
}

/// **Packing B̃**: as [`pack_a_block`], along op(B)'s columns; then `pack_b_panel_checks`.
pub fn pack_b_panel<F>(f: F) -> Verdict
where
    F: Fn(&DMatrix<f64>, Op, Range<usize>, Range<usize>, usize) -> llm_workbook::Result<Vec<f64>>,
{
    let found = pack_sweep(B_SIDE, &f, &llm_workbook::matmul::lab::pack_b_panel::<f64>);
    explained(found, || pack_b_panel_checks(&f))
}
