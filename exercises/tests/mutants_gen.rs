//! The generator of the mutants `tests/mutation.rs` runs the judges on: it reads the main
//! crate's own function behind each exercise from `../src`, copies it (with the `use` items and
//! the private helpers of its file, `crate::` and `super::` rewritten to `llm_workbook::…`) and
//! wraps every mutation site in a run-time switch, `if on(K) { mutated } else { original }`, so
//! that all the mutants compile in one build and `ACTIVE = K` turns mutant K on.
//!
//! The operators, applied mechanically at every site of the function's body (never case by
//! case): a sign or operator swapped (`+`/`−`, `/`→`×`, `<`/`≤`, `>`/`≥`, `==`/`≠`, `&&`/`||`,
//! `+=`/`−=`), an integer constant off by one, a unary minus or `!` dropped, a branch removed
//! (an `if`'s condition made false), `max`/`min` and `floor`/`ceil` swapped, an `abs` dropped.
//!
//! `cargo test -p llm-workbook-exercises --test mutants_gen` checks that the committed
//! `tests/mutation/generated.rs` is what the generator makes of the main crate today;
//! `LLM_WORKBOOK_REGENERATE=1` rewrites it.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Expr, File, Item, Lit, UnOp};

/// The functions mutated: the file under `../src`, the parent of its module (what `super::`
/// names), the public module whose items it sees unqualified, and the functions of that file
/// behind the exercises. Left out, because they call private items of their module that code
/// outside the crate cannot name: `pack_a_block` and `pack_b_panel` (`matmul`'s private `pack`
/// module); and the methods (`Mlp::backward`, `EncoderDecoder::loss_and_gradients`,
/// `NGramModel`'s counts, `AdamW::step`, `Difference::balanced_step`), which are not free
/// functions; see [`NOT_MUTATED`].
const TARGETS: &[(&str, &str, &str, &[&str])] = &[
    (
        "ch01_logistic/neuron.rs",
        "ch01_logistic",
        "ch01_logistic",
        &["sigmoid", "logits_forward", "logits_backward"],
    ),
    ("ch01_logistic/loss.rs", "ch01_logistic", "ch01_logistic", &["bce_from_logit"]),
    ("ch01_logistic/gradient.rs", "ch01_logistic", "ch01_logistic", &["sample_gradient"]),
    (
        "ch02_softmax/probabilities.rs",
        "ch02_softmax",
        "ch02_softmax",
        &["softmax_rows_forward", "softmax_rows_backward", "log_softmax_rows_backward"],
    ),
    (
        "ch03_mlp/dense.rs",
        "ch03_mlp",
        "ch03_mlp",
        &["dense_forward", "dense_backward", "mse_backward"],
    ),
    ("ch03_mlp/activations.rs", "ch03_mlp", "ch03_mlp", &["activation_backward"]),
    ("ch04_xor/linear.rs", "ch04_xor", "ch04_xor", &["least_squares_fit"]),
    (
        "ch05_positions/encoding.rs",
        "ch05_positions",
        "ch05_positions",
        &["frequency", "sinusoidal", "add_positions"],
    ),
    (
        "ch06_attention/multihead.rs",
        "ch06_attention",
        "ch06_attention",
        &["split_heads", "concat_heads", "mha_backward"],
    ),
    (
        "ch07_encoder_decoder/layers.rs",
        "ch07_encoder_decoder",
        "ch07_encoder_decoder",
        &["decoder_block_backward"],
    ),
    ("ch08_tokens/bpe.rs", "ch08_tokens", "ch08_tokens::bpe", &["apply_merges"]),
    ("ch09_gpt/sample.rs", "ch09_gpt", "ch09_gpt::sample", &["distribution"]),
    (
        "ch11_precision/format.rs",
        "ch11_precision",
        "ch11_precision",
        &["f32_to_bf16", "f16_to_f32"],
    ),
    ("ch11_precision/summation.rs", "ch11_precision", "ch11_precision", &["kahan_sum"]),
];

/// Where the generated mutants are committed.
const GENERATED: &str = "tests/mutation/generated.rs";

/// One mutation site: its number, the function, and what changes.
struct Site {
    id: u32,
    function: String,
    what: String,
}

/// The visitor that numbers the sites of one function and wraps each in its switch.
struct Mutator<'a> {
    next: &'a mut u32,
    function: String,
    sites: Vec<Site>,
}

/// A short form of an expression's tokens, for a site's description.
fn short(tokens: &TokenStream) -> String {
    let s = tokens.to_string().replace(" . ", ".").replace(" (", "(").replace("( ", "(");
    let s = s.replace(" )", ")");
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(39).collect::<String>())
    } else {
        s
    }
}

impl Mutator<'_> {
    /// Wraps `original` as `if on(K) { mutated } else { original }` and records the site.
    fn wrap(&mut self, original: &Expr, mutated: Expr, what: String) -> Expr {
        *self.next += 1;
        let id = *self.next;
        self.sites.push(Site { id, function: self.function.clone(), what });
        syn::parse_quote!((if on(#id) { #mutated } else { #original }))
    }
}

/// Whether `e` is a `let` of a let-chain (`a && let Some(x) = …`), which only an `if` may hold.
fn has_let(e: &Expr) -> bool {
    match e {
        Expr::Let(_) => true,
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => has_let(&b.left) || has_let(&b.right),
        _ => false,
    }
}

/// The exercises whose main-crate function is not mutated, and why (counted in the report).
const NOT_MUTATED: &[(&str, &str)] = &[
    ("cross_entropy_from_logits", "its file imports private helpers of `probabilities.rs`"),
    (
        "cross_entropy_from_logits_backward",
        "its file imports private helpers of `probabilities.rs`",
    ),
    ("regression_logits_backward", "its file imports a private helper of `loss.rs`"),
    ("causal_mask", "its file calls the private `AttnSpec::validate`"),
    ("padding_mask", "its file calls the private `AttnSpec::validate`"),
    ("attention_forward", "calls the private `AttnSpec::validate`"),
    ("attention_backward", "calls the private `AttnSpec::validate`"),
    ("layer_norm_forward", "calls the private `LayerNorm::validate` and `float::lane_dot`"),
    ("layer_norm_backward", "calls the private `LayerNorm::validate` and `float::lane_dot`"),
    ("ffn_backward", "its file imports the private `ch06_attention::same_shape`"),
    ("block_backward", "its file imports the private `ch06_attention::same_shape`"),
    ("cross_attention_forward", "its file calls private helpers of chapter 6"),
    ("cross_attention_backward", "its file calls private helpers of chapter 6"),
    ("quantize_block", "its file imports private items of the quantized storage"),
    ("dequantize_block", "its file imports private items of the quantized storage"),
    ("int8_block_dot", "its file imports private items of `quant`"),
    ("pack_a_block", "calls matmul's private module `pack`"),
    ("pack_b_panel", "calls matmul's private module `pack`"),
    ("mlp_backward", "a method (`Mlp::backward`)"),
    ("loss_and_gradients", "a method (`EncoderDecoder::loss_and_gradients`)"),
    ("bigram_counts", "methods (`NGramModel::fit`, its counts)"),
    ("add_k_probability", "a method (`NGramModel::add_k`)"),
    ("adamw_step", "a method (`AdamW::step`)"),
    ("balanced_step", "a method (`Difference::balanced_step`)"),
    ("lm_head_backward", "a composition of public functions in the exercise's adapter"),
    ("kv_cache_step", "calls `attend_one` through the exercise's adapter"),
    ("micro_kernel", "the exercise's adapter over `matmul`"),
    ("xor_sigmoid_net", "a printed constant, not code"),
    ("xor_relu_net", "a printed constant, not code"),
];

/// The operator a binary operator is swapped for, if any.
fn swapped(op: &BinOp) -> Option<BinOp> {
    use BinOp::*;
    Some(match op {
        Add(t) => Sub(syn::Token![-](t.span)),
        Sub(t) => Add(syn::Token![+](t.span)),
        Div(t) => Mul(syn::Token![*](t.span)),
        Lt(t) => Le(syn::Token![<=](t.span)),
        Le(t) => Lt(syn::Token![<](t.spans[0])),
        Gt(t) => Ge(syn::Token![>=](t.span)),
        Ge(t) => Gt(syn::Token![>](t.spans[0])),
        Eq(t) => Ne(syn::Token![!=](t.spans[0])),
        Ne(t) => Eq(syn::Token![==](t.spans[0])),
        And(t) => Or(syn::Token![||](t.spans[0])),
        Or(t) => And(syn::Token![&&](t.spans[0])),
        AddAssign(t) => SubAssign(syn::Token![-=](t.spans[0])),
        SubAssign(t) => AddAssign(syn::Token![+=](t.spans[0])),
        _ => return None,
    })
}

impl VisitMut for Mutator<'_> {
    fn visit_block_mut(&mut self, block: &mut syn::Block) {
        let last = block.stmts.len().saturating_sub(1);
        for (i, stmt) in block.stmts.iter_mut().enumerate() {
            self.visit_stmt_mut(stmt);
            // A statement `if …` wrapped in its switch is an expression: it needs its `;`.
            if let syn::Stmt::Expr(e @ Expr::Paren(_), semi @ None) = stmt
                && i < last
            {
                let _ = e;
                *semi = Some(syn::Token![;](proc_macro2::Span::call_site()));
            }
        }
    }

    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            // The left side of an assignment is a place, not a value: only its right side.
            Expr::Assign(a) => {
                self.visit_expr_mut(&mut a.right);
                return;
            }
            // An array's length is a constant.
            Expr::Repeat(r) => {
                self.visit_expr_mut(&mut r.expr);
                return;
            }
            _ => {}
        }
        // The sites inside first, then this expression's own.
        if let Expr::Binary(b) = e {
            if matches!(b.op, BinOp::AddAssign(_) | BinOp::SubAssign(_)) {
                self.visit_expr_mut(&mut b.right);
            } else {
                visit_mut::visit_expr_mut(self, e);
            }
        } else {
            visit_mut::visit_expr_mut(self, e);
        }
        let original = e.clone();
        let replacement = match &original {
            Expr::Binary(b) if has_let(&b.left) || has_let(&b.right) => None,
            Expr::Binary(b) => swapped(&b.op).map(|op| {
                let mut m = b.clone();
                m.op = op;
                let (from, to) = (b.op.to_token_stream(), m.op.to_token_stream());
                (
                    Expr::Binary(m),
                    format!("`{from}` → `{to}` in `{}`", short(&original.to_token_stream())),
                )
            }),
            Expr::Lit(l) => match &l.lit {
                Lit::Int(i) => i.base10_parse::<u64>().ok().map(|v| {
                    let lit = syn::LitInt::new(&format!("{}{}", v + 1, i.suffix()), i.span());
                    (syn::parse_quote!(#lit), format!("the constant {v} → {}", v + 1))
                }),
                _ => None,
            },
            Expr::Unary(u) => match u.op {
                UnOp::Neg(_) => Some((
                    (*u.expr).clone(),
                    format!("the minus dropped from `{}`", short(&original.to_token_stream())),
                )),
                UnOp::Not(_) => Some((
                    (*u.expr).clone(),
                    format!("the `!` dropped from `{}`", short(&original.to_token_stream())),
                )),
                _ => None,
            },
            Expr::If(i) if !matches!(*i.cond, Expr::Let(_)) => {
                let mut m = i.clone();
                m.cond = Box::new(syn::parse_quote!(false));
                Some((
                    Expr::If(m),
                    format!("the branch `if {}` removed", short(&i.cond.to_token_stream())),
                ))
            }
            Expr::MethodCall(c) => {
                let name = c.method.to_string();
                let other = match name.as_str() {
                    "max" => Some("min"),
                    "min" => Some("max"),
                    "floor" => Some("ceil"),
                    "ceil" => Some("floor"),
                    _ => None,
                };
                if let Some(other) = other {
                    let mut m = c.clone();
                    m.method = syn::Ident::new(other, c.method.span());
                    Some((Expr::MethodCall(m), format!("`.{name}(…)` → `.{other}(…)`")))
                } else if name == "abs" && c.args.is_empty() {
                    Some((
                        (*c.receiver).clone(),
                        format!("`.abs()` dropped from `{}`", short(&original.to_token_stream())),
                    ))
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some((mutated, what)) = replacement {
            *e = self.wrap(&original, mutated, what);
        }
    }
}

/// `tokens` with `crate::` and `super::` paths rewritten for code outside the crate.
fn rewrite(tokens: String, parent: &str) -> String {
    let parent = parent.replace("::", " :: ");
    tokens
        .replace("crate ::", "llm_workbook ::")
        .replace("super ::", &format!("llm_workbook :: {parent} ::"))
}

/// The generated file: the switch, then one module per source file.
fn generate() -> String {
    let mut out = String::from(
        "// @generated by tests/mutants_gen.rs from the main crate's sources: do not edit.\n\n\
         use std::sync::atomic::{AtomicU32, Ordering};\n\n\
         /// The mutant turned on (0: none, the main crate's own code).\n\
         pub static ACTIVE: AtomicU32 = AtomicU32::new(0);\n\n\
         /// Whether mutant `k` is on.\n\
         #[inline(never)]\n\
         pub fn on(k: u32) -> bool {\n    ACTIVE.load(Ordering::Relaxed) == k\n}\n\n",
    );
    let mut next = 0u32;
    let mut all_sites = Vec::new();
    for (path, parent, glob, functions) in TARGETS {
        let source = std::fs::read_to_string(format!("../src/{path}")).expect("a source file");
        let file: File = syn::parse_file(&source).expect("the source parses");
        let module = path.trim_end_matches(".rs").replace(['/', '.'], "_");
        let mut body = TokenStream::new();
        for item in &file.items {
            match item {
                Item::Use(u) => {
                    let mut u = u.clone();
                    u.attrs.clear();
                    u.vis = syn::Visibility::Inherited;
                    u.to_tokens(&mut body);
                }
                Item::Fn(f) if functions.contains(&f.sig.ident.to_string().as_str()) => {
                    let mut f = f.clone();
                    f.attrs.retain(|a| !a.path().is_ident("doc"));
                    let mut m = Mutator {
                        next: &mut next,
                        function: f.sig.ident.to_string(),
                        sites: Vec::new(),
                    };
                    m.visit_block_mut(&mut f.block);
                    all_sites.extend(m.sites.into_iter().map(|s| (path.to_string(), s)));
                    f.to_tokens(&mut body);
                }
                Item::Fn(f) if !matches!(f.vis, syn::Visibility::Public(_)) => {
                    let mut f = f.clone();
                    f.attrs.retain(|a| !a.path().is_ident("doc") && !a.path().is_ident("test"));
                    if f.attrs.iter().any(|a| a.path().is_ident("cfg")) {
                        continue;
                    }
                    f.to_tokens(&mut body);
                }
                Item::Const(c) if !matches!(c.vis, syn::Visibility::Public(_)) => {
                    let mut c = c.clone();
                    c.attrs.retain(|a| !a.path().is_ident("doc"));
                    c.to_tokens(&mut body);
                }
                _ => {}
            }
        }
        let parent_path: TokenStream = format!("llm_workbook::{glob}").parse().expect("a path");
        let body = rewrite(body.to_string(), parent);
        out.push_str(&format!(
            "/// Mutants of `src/{path}`.\npub mod {module} {{\n    use super::on;\n    #[allow(unused_imports)]\n    use {}::*;\n    {body}\n}}\n\n",
            quote!(#parent_path)
        ));
    }
    out.push_str("/// Every mutant: its number, the file, the function and what changes.\n");
    out.push_str("pub const MUTANTS: &[(u32, &str, &str, &str)] = &[\n");
    for (path, s) in &all_sites {
        out.push_str(&format!("    ({}, {:?}, {:?}, {:?}),\n", s.id, path, s.function, s.what));
    }
    out.push_str("];\n\n/// The exercises whose function is not mutated, and why.\n");
    out.push_str("pub const NOT_MUTATED: &[(&str, &str)] = &[\n");
    for (name, why) in NOT_MUTATED {
        out.push_str(&format!("    ({name:?}, {why:?}),\n"));
    }
    out.push_str("];\n");
    out
}

#[test]
fn the_committed_mutants_are_generated_from_the_main_crate() {
    let made = generate();
    if std::env::var_os("LLM_WORKBOOK_REGENERATE").is_some() {
        std::fs::write(GENERATED, &made).expect("writing the mutants");
    }
    let committed = std::fs::read_to_string(GENERATED).unwrap_or_default();
    assert!(
        committed == made,
        "{GENERATED} is not what the generator makes of ../src today: run \
         LLM_WORKBOOK_REGENERATE=1 cargo test -p llm-workbook-exercises --test mutants_gen"
    );
}
