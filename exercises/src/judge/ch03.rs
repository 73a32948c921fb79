//! Judges of chapter 3's exercises.

use super::{
    Section, Verdict, attempt, attempt_ok, compare, gradient_check, note, random, weighted_sum,
};
use llm_workbook::Result;
use llm_workbook::ch03_mlp as book;
use nalgebra::DMatrix;

const LAYER: Section = Section { chapter: "ch03_mlp", anchor: "1-a-layer" };
const ACTIVATIONS: Section = Section { chapter: "ch03_mlp", anchor: "activations" };
const COST: Section = Section { chapter: "ch03_mlp", anchor: "2-the-cost-and-gradient-descent" };
const MANY: Section = Section { chapter: "ch03_mlp", anchor: "4-many-neurons-per-layer" };

/// The main crate's layer on random x, W, b (the bias on every row); an error when widths differ.
fn dense_forward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    let (x, w, b) = (random(20, 4, 3), random(21, 3, 2), random(22, 1, 2));
    let yours =
        super::attempt_ok_on(LAYER, "dense_forward", &[("x", &x), ("w", &w), ("b", &b)], || {
            f(&x, &w, &b)
        })?;
    let want = book::dense_forward(&x, &w, &b).map_err(|e| e.to_string())?;
    let no_bias = &x * &w;
    if yours.shape() == want.shape() && (&yours - &no_bias).abs().max() < 1e-12 {
        return Err(LAYER.fail("your y is xW without the bias: add b (1×out) to every row"));
    }
    compare(LAYER, "y = xW + b", &yours, &want, 1e-10, &[])?;
    super::probe(super::Probe::Errors);
    match attempt(LAYER, "dense_forward", || f(&x, &random(23, 2, 2), &b))? {
        Err(_) => Ok(()),
        Ok(_) => Err(LAYER.fail("x is 4×3 and W 2×2: the widths do not chain; return an Err")),
    }
}

/// The gradient check of C = Σ G ⊙ (xW + b) in x, W and b, on a non-square W (so a misplaced
/// transpose shows in the shapes).
fn dense_backward_checks(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (x, w, b, g) = (random(24, 5, 3), random(25, 3, 2), random(26, 1, 2), random(27, 5, 2));
    let (d_x, d_w, d_b) =
        super::attempt_ok_on(MANY, "dense_backward", &[("x", &x), ("w", &w), ("d_y", &g)], || {
            f(&x, &w, &g)
        })?;
    gradient_check(
        MANY,
        &[("x", x.clone()), ("W", w.clone()), ("b", b.clone())],
        &[d_x, d_w, d_b],
        |t| {
            book::dense_forward(&t[0], &t[1], &t[2])
                .map(|y| weighted_sum(&g, &y))
                .unwrap_or(f64::NAN)
        },
        &[(0.2, "∂C/∂b is the column sums of ∂C/∂y, not their mean")],
    )
}

fn activation_judge(
    sec: Section,
    name: &str,
    act: book::Activation,
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let (z, g) = (random(28, 4, 3) * 2.0, random(29, 4, 3));
    let d_z = super::attempt_ok_on(sec, name, &[("z", &z), ("d_a", &g)], || f(&z, &g))?;
    gradient_check(
        sec,
        &[("z", z.clone())],
        &[d_z],
        |t| weighted_sum(&g, &book::activation_forward(act, &t[0])),
        &[],
    )
}

/// The gradient check of Σ G ⊙ ReLU(z) at random z; 0 at the kink z = 0 (the chapter's
/// convention); an error when shapes differ.
fn relu_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order]);
    super::probe(super::Probe::Batch);
    activation_judge(ACTIVATIONS, "relu_backward", book::Activation::Relu, &f).map_err(|m| {
        note(m, "ReLU passes ∂C/∂a where z > 0 and blocks it where z ≤ 0: test z, not ∂C/∂a")
    })?;
    let kink = attempt_ok(ACTIVATIONS, "relu_backward", || {
        f(&DMatrix::zeros(1, 1), &DMatrix::from_element(1, 1, 1.0))
    })?;
    if kink.get((0, 0)) != Some(&0.0) {
        return Err(ACTIVATIONS.fail(format!(
            "at the kink z = 0 the chapter takes f′(0) = 0; yours passes {:?}",
            kink.get((0, 0))
        )));
    }
    super::probe(super::Probe::Errors);
    match attempt(ACTIVATIONS, "relu_backward", || f(&DMatrix::zeros(2, 2), &DMatrix::zeros(2, 3)))?
    {
        Err(_) => Ok(()),
        Ok(_) => Err(ACTIVATIONS.fail("z is 2×2 and d_a 2×3: return an Err naming them")),
    }
}

/// The gradient check of Σ G ⊙ GELU(z) at random z (GELU with the exact erf), then Φ(z) + z φ(z)
/// at |z| up to 30, compared relatively.
fn gelu_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    activation_judge(ACTIVATIONS, "gelu_backward", book::Activation::GeluErf, &f)
        .map_err(|m| note(m, "d/dz [z Φ(z)] has two terms by the product rule: Φ(z) + z φ(z)"))?;
    // Scale: |z| up to 30, compared relatively, so the left tail's tiny values must be right.
    super::probe(super::Probe::Scale);
    let z = DMatrix::from_row_slice(2, 3, &[-30.0, -10.0, -5.0, 5.0, 10.0, 30.0]);
    let g = DMatrix::from_element(2, 3, 1.0);
    let d_z =
        super::attempt_ok_on(ACTIVATIONS, "gelu_backward", &[("z", &z), ("d_a", &g)], || {
            f(&z, &g)
        })?;
    let want = z.map(|z| book::normal_cdf(z) + z * book::normal_pdf(z));
    super::compare_relative(ACTIVATIONS, "∂C/∂z at |z| up to 30", &d_z, &want, 1e-6).map_err(|m| {
        note(
            m,
            "in the left tail Φ(z) is tiny: 1 − Φ(−z) or ½(1 + erf(z/√2)) rounds it to 0 — \
             use Φ(z) = ½ erfc(−z/√2)",
        )
    })
}

/// The gradient check of C = mse(a, y) in a, for N = 4 rows and K = 3 columns (so that a division
/// by N·K = 12 is not mistaken for a missing 2).
fn mse_backward_checks(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    let (a, y) = (random(30, 4, 3), random(31, 4, 3));
    let d_a = super::attempt_ok_on(COST, "mse_backward", &[("a", &a), ("y", &y)], || f(&a, &y))?;
    gradient_check(
        COST,
        &[("a", a.clone())],
        &[d_a],
        |t| book::mse(&t[0], &y).unwrap_or(f64::NAN),
        &[
            (4.0, "a missing 1/N: C is the mean over the N = 4 rows"),
            (0.5, "a missing 2: d/da (a − y)² = 2(a − y)"),
            (2.0, "a missing 2 and 1/N"),
            (0.25, "an extra 1/N"),
            (
                1.0 / 3.0,
                "a division by N·K = 12: C averages over the N = 4 rows only (each row's squares \
                 are summed)",
            ),
            (
                1.0 / 6.0,
                "a missing 2 and a division by N·K: d/da (a − y)² = 2(a − y), and C averages over \
                 the N rows only",
            ),
            (-1.0, "it is 2(a − y)/N, not 2(y − a)/N"),
        ],
    )
}

type MlpBackward<'a> = &'a dyn Fn(
    &book::Mlp<f64>,
    &book::Trace<f64>,
    &DMatrix<f64>,
) -> Result<(Vec<book::LayerGrads<f64>>, DMatrix<f64>)>;

/// The gradient check of C = Σ G ⊙ MLP(x) in x and every layer's W and b, on two networks:
/// widths 3 → 4 → 5 → 2 (sigmoid hidden layers, a linear output) and 2 → 3 → 1 (GELU, a sigmoid
/// output). The gradients come first layer first, one per layer, shaped like the layer.
fn mlp_backward_checks(
    f: impl Fn(
        &book::Mlp<f64>,
        &book::Trace<f64>,
        &DMatrix<f64>,
    ) -> Result<(Vec<book::LayerGrads<f64>>, DMatrix<f64>)>,
) -> Verdict {
    super::not_applicable(&[super::Probe::Scale, super::Probe::Order, super::Probe::Errors]);
    super::probe(super::Probe::Batch);
    super::probe(super::Probe::Named);
    let nets = [
        (30, vec![3, 4, 5, 2], book::Activation::Sigmoid, None),
        (31, vec![2, 3, 1], book::Activation::GeluErf, Some(book::Activation::Sigmoid)),
    ];
    for (seed, sizes, hidden, output) in nets {
        let mut rng = llm_workbook::rng::Rng::new(seed);
        let mlp =
            book::Mlp::random(&sizes, hidden, output, 0.5, &mut rng).map_err(|e| e.to_string())?;
        check_mlp(&f, &mlp, seed)?;
    }
    Ok(())
}

fn check_mlp(f: MlpBackward, mlp: &book::Mlp<f64>, seed: u64) -> Verdict {
    let sizes = mlp.sizes();
    let depth = mlp.layers().len();
    let x = random(seed + 10, 4, sizes[0]);
    let g = random(seed + 20, 4, sizes[depth]);
    let trace = mlp.forward(&x).map_err(|e| e.to_string())?;
    let (grads, d_x) = super::attempt_ok_on(
        MANY,
        "mlp_backward",
        &[("mlp", mlp), ("trace", &trace), ("d_out", &g)],
        || f(mlp, &trace, &g),
    )?;
    let net = format!("the {sizes:?} network");
    if grads.len() != depth {
        return Err(MANY.fail(format!(
            "{net} has {depth} layers; yours returned {} gradients (one (∂C/∂W, ∂C/∂b) per layer)",
            grads.len()
        )));
    }
    let backwards = grads.iter().rev().zip(mlp.layers()).all(|(g, l)| g.d_w.shape() == l.w.shape());
    let forwards = grads.iter().zip(mlp.layers()).all(|(g, l)| g.d_w.shape() == l.w.shape());
    if backwards && !forwards {
        return Err(MANY.fail_hint(
            format!(
                "{net}: your gradients are last layer first, the order backpropagation finds them"
            ),
            "return them first layer first (reverse the list at the end)",
        ));
    }
    let mut inputs = vec![("x".to_string(), x.clone())];
    let mut analytic = vec![d_x];
    for (l, (layer, grad)) in mlp.layers().iter().zip(grads).enumerate() {
        inputs.push((format!("W⁽{}⁾", l + 1), layer.w.clone()));
        inputs.push((format!("b⁽{}⁾", l + 1), layer.b.clone()));
        analytic.push(grad.d_w);
        analytic.push(grad.d_b);
    }
    let named: Vec<(&str, DMatrix<f64>)> =
        inputs.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
    let activations: Vec<_> = mlp.layers().iter().map(|l| l.activation).collect();
    gradient_check(
        MANY,
        &named,
        &analytic,
        |t| {
            let layers = activations
                .iter()
                .enumerate()
                .map(|(l, &activation)| book::Layer {
                    w: t[1 + 2 * l].clone(),
                    b: t[2 + 2 * l].clone(),
                    activation,
                })
                .collect();
            book::Mlp::from_layers(layers)
                .and_then(|m| m.predict(&t[0]))
                .map(|y| weighted_sum(&g, &y))
                .unwrap_or(f64::NAN)
        },
        &[],
    )
    .map_err(|m| {
        note(
            note(m, &format!("in {net}")),
            "each layer, last to first: the activation's backward first (∂C/∂z = f′(z) ⊙ ∂C/∂a, \
             f′ at the layer's pre-activation z), then the dense layer's; its ∂C/∂x is the \
             previous layer's ∂C/∂a",
        )
    })
}

// ───────────── the judges: the sweep against the main crate, then the checks above ─────────────

use super::sweep::{Fixed, Gen, Named, SCALES, SHAPES, Tol, explained, outcome, sweep};

/// The (N, in, out) of the dense layers the sweep tries: 1s, unequal widths, N = 0.
const DENSE_SIZES: [(usize, usize, usize); 6] =
    [(1, 1, 1), (1, 3, 2), (4, 2, 3), (3, 5, 1), (0, 2, 3), (5, 1, 4)];

/// **xW + b**: every size of the sweep at every scale, and widths that do not chain (x's columns
/// against W's rows, W's columns against b's): an error must meet an error; then
/// `dense_forward_checks`.
pub fn dense_forward(
    f: impl Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    dense_forward_judged(&f)
}

/// [`dense_forward`]'s judge, compiled once here rather than in every test that calls it.
fn dense_forward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let mut draw = Gen::new("dense_forward");
    let mut cases = Vec::new();
    for (n, i, o) in DENSE_SIZES {
        for &s in &SCALES {
            cases.push((draw.matrix(n, i, s), draw.matrix(i, o, 1.0), draw.matrix(1, o, s)));
        }
        cases.push((draw.matrix(n, i + 1, 1.0), draw.matrix(i, o, 1.0), draw.matrix(1, o, 1.0)));
        cases.push((draw.matrix(n, i, 1.0), draw.matrix(i, o, 1.0), draw.matrix(1, o + 1, 1.0)));
    }
    let found = sweep(
        LAYER,
        "dense_forward",
        Tol::F64,
        &cases,
        |(x, w, b)| outcome(f(x, w, b)),
        |(x, w, b)| outcome(book::dense_forward(x, w, b)),
    );
    explained(found, || dense_forward_checks(f))
}

/// **(∂C/∂y Wᵀ, xᵀ ∂C/∂y, column sums)**: every size of the sweep at every scale; then
/// `dense_backward_checks`.
pub fn dense_backward(
    f: impl Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    dense_backward_judged(&f)
}

/// [`dense_backward`]'s judge, compiled once here rather than in every test that calls it.
fn dense_backward_judged(
    f: &dyn Fn(
        &DMatrix<f64>,
        &DMatrix<f64>,
        &DMatrix<f64>,
    ) -> Result<(DMatrix<f64>, DMatrix<f64>, DMatrix<f64>)>,
) -> Verdict {
    let mut draw = Gen::new("dense_backward");
    let mut cases = Vec::new();
    for (n, i, o) in DENSE_SIZES.into_iter().filter(|s| s.0 > 0) {
        for &s in &SCALES {
            cases.push((draw.matrix(n, i, 1.0), draw.matrix(i, o, s), draw.matrix(n, o, s)));
        }
    }
    let found = sweep(
        MANY,
        "dense_backward",
        Tol::F64,
        &cases,
        |(x, w, d)| outcome(f(x, w, d)),
        |(x, w, d)| outcome(book::dense_backward(x, w, d).map(|g| (g.d_x, g.d_w, g.d_b))),
    );
    explained(found, || dense_backward_checks(f))
}

/// Pre-activations at every shape and scale (with exact zeros, the kink) and an upstream
/// gradient of the same shape.
fn activation_cases(draw: &mut Gen) -> Vec<(DMatrix<f64>, DMatrix<f64>)> {
    let mut cases = Vec::new();
    for &(n, c) in SHAPES.iter().filter(|s| s.0 > 0) {
        for &s in &SCALES {
            let mut z = draw.matrix(n, c, s);
            if let Some(v) = z.get_mut((0, 0)) {
                *v = 0.0;
            }
            cases.push((z, draw.matrix(n, c, 1.0)));
        }
        let z = DMatrix::from_fn(n, c, |r, k| (r * c + k) as f64 * 7.0 - 20.0);
        cases.push((z, draw.matrix(n, c, 1.0)));
    }
    cases
}

/// The sweep of an activation's backward against the main crate's `activation_backward`.
fn activation_sweep(
    exercise: &str,
    kind: book::Activation,
    f: &impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let cases = activation_cases(&mut Gen::new(exercise));
    sweep(
        ACTIVATIONS,
        exercise,
        Tol::F64,
        &cases,
        |(z, d)| outcome(f(z, d)),
        |(z, d)| outcome(book::activation_backward(kind, z, d)),
    )
}

/// **ReLU's backward**: pre-activations of every shape and scale, exact zeros (f′(0) = 0)
/// included; then `relu_backward_checks`.
pub fn relu_backward(f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    relu_backward_judged(&f)
}

/// [`relu_backward`]'s judge, compiled once here rather than in every test that calls it.
fn relu_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let found = activation_sweep("relu_backward", book::Activation::Relu, &f);
    explained(found, || relu_backward_checks(f))
}

/// **GELU's backward**: pre-activations of every shape and scale, tails at ±20 and beyond;
/// then `gelu_backward_checks`.
pub fn gelu_backward(f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    gelu_backward_judged(&f)
}

/// [`gelu_backward`]'s judge, compiled once here rather than in every test that calls it.
fn gelu_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let found = activation_sweep("gelu_backward", book::Activation::GeluErf, &f);
    explained(found, || gelu_backward_checks(f))
}

/// **2(a − y)/N**: every shape and scale; then `mse_backward_checks`.
pub fn mse_backward(f: impl Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>) -> Verdict {
    mse_backward_judged(&f)
}

/// [`mse_backward`]'s judge, compiled once here rather than in every test that calls it.
fn mse_backward_judged(
    f: &dyn Fn(&DMatrix<f64>, &DMatrix<f64>) -> Result<DMatrix<f64>>,
) -> Verdict {
    let mut draw = Gen::new("mse_backward");
    let mut cases = Vec::new();
    for &(n, c) in SHAPES.iter().filter(|s| s.0 > 0) {
        for &s in &SCALES {
            cases.push((draw.matrix(n, c, s), draw.matrix(n, c, s)));
        }
    }
    let found = sweep(
        COST,
        "mse_backward",
        Tol::F64,
        &cases,
        |(a, y)| outcome(f(a, y)),
        |(a, y)| outcome(book::mse_backward(a, y)),
    );
    explained(found, || mse_backward_checks(f))
}

/// One network of the MLP sweep: (seed, widths, hidden activation, output activation, N, the
/// scale of x).
type MlpSpec =
    (u64, Vec<usize>, Fixed<book::Activation>, Fixed<Option<book::Activation>>, usize, f64);

/// The network, trace and upstream gradient of a spec.
fn mlp_inputs(
    spec: &MlpSpec,
) -> llm_workbook::Result<(book::Mlp<f64>, book::Trace<f64>, DMatrix<f64>)> {
    let (seed, sizes, hidden, output, n, scale) = spec;
    let mut rng = llm_workbook::rng::Rng::new(*seed);
    let mlp = book::Mlp::random(sizes, hidden.0, output.0, 0.8, &mut rng)?;
    let x = rng.normal_matrix(*n, sizes[0], *scale);
    let g = rng.normal_matrix(*n, sizes[sizes.len() - 1], 1.0);
    let trace = mlp.forward(&x)?;
    Ok((mlp, trace, g))
}

/// The gradients of an MLP as named matrices: ∂C/∂W⁽ˡ⁾, ∂C/∂b⁽ˡ⁾ for each layer, then ∂C/∂x.
fn mlp_named((grads, d_x): (Vec<book::LayerGrads<f64>>, DMatrix<f64>)) -> Named {
    let mut parts = Vec::new();
    for (l, g) in grads.into_iter().enumerate() {
        parts.push((format!("∂C/∂W⁽{}⁾", l + 1), g.d_w));
        parts.push((format!("∂C/∂b⁽{}⁾", l + 1), g.d_b));
    }
    parts.push(("∂C/∂x".to_string(), d_x));
    Named(parts)
}

/// **Backpropagation through an MLP**: networks of one to three layers with every activation
/// (sigmoid, ReLU, both GELU forms) in the hidden layers and at the output (or none), unequal
/// widths, N from 1 to 5, x at every scale; then `mlp_backward_checks`.
pub fn mlp_backward(
    f: impl Fn(
        &book::Mlp<f64>,
        &book::Trace<f64>,
        &DMatrix<f64>,
    ) -> Result<(Vec<book::LayerGrads<f64>>, DMatrix<f64>)>,
) -> Verdict {
    mlp_backward_judged(&f)
}

/// [`mlp_backward`]'s judge, compiled once here rather than in every test that calls it.
fn mlp_backward_judged(
    f: &dyn Fn(
        &book::Mlp<f64>,
        &book::Trace<f64>,
        &DMatrix<f64>,
    ) -> Result<(Vec<book::LayerGrads<f64>>, DMatrix<f64>)>,
) -> Verdict {
    let mut cases: Vec<MlpSpec> = Vec::new();
    let widths = [vec![2, 3], vec![3, 4, 2], vec![2, 5, 3, 1], vec![1, 1]];
    let mut seed = 300;
    for hidden in book::Activation::ALL {
        for output in [None, Some(hidden), Some(book::Activation::Sigmoid)] {
            for sizes in &widths {
                for (n, scale) in [(1, 1.0), (4, 2.0), (3, 0.01)] {
                    seed += 1;
                    cases.push((seed, sizes.clone(), Fixed(hidden), Fixed(output), n, scale));
                }
            }
        }
    }
    let found = sweep(
        MANY,
        "mlp_backward",
        Tol::F64,
        &cases,
        |spec| {
            let (mlp, trace, g) = outcome(mlp_inputs(spec))?;
            outcome(f(&mlp, &trace, &g)).map(mlp_named)
        },
        |spec| {
            let (mlp, trace, g) = outcome(mlp_inputs(spec))?;
            outcome(mlp.backward(&trace, &g)).map(mlp_named)
        },
    );
    explained(found, || mlp_backward_checks(f))
}
