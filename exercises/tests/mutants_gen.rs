//! The generator of the mutants `tests/mutation.rs` runs the judges on: it reads the main
//! crate's own function behind each exercise from `../src`, copies it (with the `use` items and
//! the private helpers of its file that it reaches by name, `crate::` and `super::` rewritten to
//! `llm_workbook::…`) and wraps every mutation site of it and of those helpers in a run-time
//! switch, `if on(K) { mutated } else { original }`, so that all the mutants compile in one build
//! and `ACTIVE = K` turns mutant K on. A method (`Type::method`) and the private methods a copy
//! calls are copied into an extension trait implemented for the type, which a method call
//! prefers to the inherent method it cannot reach; the crate-private functions, constants and
//! types of other files a copy names (through a path, a private `use` re-export, or a private
//! module it imports by name, `use super::pack;`) are copied into a module of their own, which the
//! copy imports under the same name: unaltered, or mutated when that file is a target too. A type
//! private to the crate is copied as a type of its own, with its inherent methods.
//!
//! The operators, applied mechanically at every site of the function's body (never case by
//! case): a sign or operator swapped (`+`/`−`, `/`→`×`, `<`/`≤`, `>`/`≥`, `==`/`≠`, `&&`/`||`,
//! `+=`/`−=`), an integer constant off by one, a unary minus or `!` dropped, a branch removed
//! (an `if`'s condition made false), `max`/`min` and `floor`/`ceil` swapped, an `abs` dropped
//! (written |x|·sign(x), which keeps the type when x is a reference).
//!
//! `cargo test -p llm-workbook-exercises --test mutants_gen` checks that the committed
//! `tests/mutation/generated.rs` is what the generator makes of the main crate today;
//! `LLM_WORKBOOK_REGENERATE=1` rewrites it.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use std::collections::BTreeSet;
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Expr, File, Item, Lit, UnOp};

/// The functions mutated: the file under `../src`, the parent of its module (what `super::`
/// names), the public module whose items it sees unqualified, and the functions of that file
/// behind the exercises (`Type::method` for a method). A file whose crate-private items another
/// target calls (`matmul/pack.rs`, chapter 9's fused causal block) is a target too, so that those
/// items are mutated where the exercise's maths is done. Left out: see [`NOT_MUTATED`].
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
    ("ch03_mlp/mlp.rs", "ch03_mlp", "ch03_mlp::mlp", &["Mlp::backward"]),
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
    (
        "ch07_encoder_decoder/model.rs",
        "ch07_encoder_decoder",
        "ch07_encoder_decoder::model",
        &["EncoderDecoder::loss_and_gradients"],
    ),
    ("ch08_tokens/bpe.rs", "ch08_tokens", "ch08_tokens::bpe", &["apply_merges"]),
    (
        "ch08_tokens/ngram.rs",
        "ch08_tokens",
        "ch08_tokens::ngram",
        &["context_followers", "NGramModel::add_k"],
    ),
    ("ch09_gpt/sample.rs", "ch09_gpt", "ch09_gpt::sample", &["distribution"]),
    (
        "ch11_precision/format.rs",
        "ch11_precision",
        "ch11_precision",
        &["f32_to_bf16", "f16_to_f32"],
    ),
    ("ch11_precision/summation.rs", "ch11_precision", "ch11_precision", &["kahan_sum"]),
    (
        "ch02_softmax/loss.rs",
        "ch02_softmax",
        "ch02_softmax::loss",
        &[
            "cross_entropy_from_logits",
            "cross_entropy_from_logits_backward",
            "cross_entropy_from_logits_with_gradient",
        ],
    ),
    (
        "ch02_softmax/regression.rs",
        "ch02_softmax",
        "ch02_softmax::regression",
        &["regression_logits_backward"],
    ),
    (
        "ch06_attention/attention.rs",
        "ch06_attention",
        "ch06_attention::attention",
        &["causal_mask", "padding_mask", "attention_forward", "attention_backward"],
    ),
    (
        "ch06_attention/layer_norm.rs",
        "ch06_attention",
        "ch06_attention::layer_norm",
        &["layer_norm_forward", "layer_norm_backward"],
    ),
    (
        "ch06_attention/block.rs",
        "ch06_attention",
        "ch06_attention::block",
        &["ffn_backward", "block_backward"],
    ),
    (
        "ch07_encoder_decoder/cross_attention.rs",
        "ch07_encoder_decoder",
        "ch07_encoder_decoder::cross_attention",
        &["cross_attention_forward", "cross_attention_backward"],
    ),
    (
        "ch11_precision/quant.rs",
        "ch11_precision",
        "ch11_precision::quant",
        &["block_scale", "quantize_value", "dequantize_block"],
    ),
    (
        "ch11_precision/quant_step.rs",
        "ch11_precision",
        "ch11_precision::quant_step",
        &["column_dot_reference"],
    ),
    (
        "ch11_precision/steps.rs",
        "ch11_precision",
        "ch11_precision::steps",
        &["Difference::balanced_step"],
    ),
    (
        "ch12_modern/rms_norm.rs",
        "ch12_modern",
        "ch12_modern::rms_norm",
        &["rms_norm_forward", "rms_norm_backward"],
    ),
    (
        "ch12_modern/rope.rs",
        "ch12_modern",
        "ch12_modern::rope",
        &["rope_frequencies", "RopeTable::new", "rope_forward", "rope_backward"],
    ),
    ("ch12_modern/glu.rs", "ch12_modern", "ch12_modern::glu", &["glu_forward", "glu_backward"]),
    (
        "ch12_modern/gqa.rs",
        "ch12_modern",
        "ch12_modern::gqa",
        &["gqa_forward_with", "gqa_backward_with"],
    ),
    ("ch12_modern/mod.rs", "", "ch12_modern", &["KvCacheShape::bytes_per_token"]),
    (
        "ch13_finetune/sft.rs",
        "ch13_finetune",
        "ch13_finetune::sft",
        &[
            "masked_cross_entropy_forward",
            "masked_cross_entropy_backward",
            "sequence_log_prob_backward",
            "token_log_probs_backward",
        ],
    ),
    (
        "ch13_finetune/lora.rs",
        "ch13_finetune",
        "ch13_finetune::lora",
        &["Lora::new", "lora_forward", "lora_backward"],
    ),
    (
        "ch13_finetune/dpo.rs",
        "ch13_finetune",
        "ch13_finetune::dpo",
        &["sigmoid", "neg_log_sigmoid", "reward_margin", "dpo_forward", "dpo_backward"],
    ),
    (
        "ch13_finetune/grpo.rs",
        "ch13_finetune",
        "ch13_finetune::grpo",
        &["group_advantages", "k3", "clipped_surrogate", "grpo_forward", "grpo_backward"],
    ),
    ("ch09_gpt/fast/cached.rs", "ch09_gpt::fast", "ch09_gpt::fast", &["attend_one"]),
    ("ch09_gpt/fast/forward.rs", "ch09_gpt::fast", "ch09_gpt::fast", &["causal_block_forward"]),
    ("optim.rs", "", "optim", &["AdamW::step"]),
    ("matmul/lab.rs", "matmul", "matmul::lab", &["pack_a_block", "pack_b_panel", "scalar_update"]),
    ("matmul/pack.rs", "matmul", "matmul", &["pack_a"]),
    ("matmul/scalar.rs", "matmul", "matmul", &["kernel"]),
];

/// Where the generated mutants are committed.
const GENERATED: &str = "tests/mutation/generated.rs";

/// One mutation site: its number, the function, and what changes.
struct Site {
    id: u32,
    function: String,
    /// The functions behind the exercises whose copies run this site (the function itself, or
    /// for a private helper of the file, the functions mutated that call it).
    roots: Vec<String>,
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
        let function = self.function.clone();
        self.sites.push(Site { id, roots: vec![function.clone()], function, what });
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
    ("xor_sigmoid_net", "a printed constant, not a function"),
    ("xor_relu_net", "a printed constant, not a function"),
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
    // A constant's value is computed at compile time, where no switch can be read: left as is.
    fn visit_item_const_mut(&mut self, _: &mut syn::ItemConst) {}

    // Types, const generic arguments included, are fixed at compile time too.
    fn visit_type_mut(&mut self, _: &mut syn::Type) {}

    fn visit_generic_argument_mut(&mut self, a: &mut syn::GenericArgument) {
        if !matches!(a, syn::GenericArgument::Const(_)) {
            visit_mut::visit_generic_argument_mut(self, a);
        }
    }

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
            Expr::If(i) if !has_let(&i.cond) => {
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
                    // |x|·sign(x) is x, of |x|'s type (x itself may be a reference).
                    let x = &c.receiver;
                    Some((
                        syn::parse_quote!((#original * #x.signum())),
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
    let to_parent = if parent.is_empty() {
        "llm_workbook ::".to_string()
    } else {
        format!("llm_workbook :: {} ::", parent.replace("::", " :: "))
    };
    tokens.replace("crate ::", "llm_workbook ::").replace("super ::", &to_parent)
}

/// The module path (from the crate's root) of a file under `../src`: `a/b.rs` is `a::b`,
/// `a/mod.rs` is `a`.
fn module_of(file: &str) -> Vec<String> {
    let trimmed = file.trim_end_matches(".rs");
    let trimmed = trimmed.strip_suffix("/mod").unwrap_or(trimmed);
    trimmed.split('/').map(String::from).collect()
}

/// The file under `../src` of a module path, if the module has a file of its own.
fn file_of(module: &[String]) -> Option<String> {
    if module.is_empty() {
        return Some("lib.rs".into());
    }
    let base = module.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")]
        .into_iter()
        .find(|f| std::path::Path::new(&format!("../src/{f}")).exists())
}

thread_local! {
    /// The files parsed so far.
    static PARSED: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<File>>> =
        Default::default();
}

/// The parsed source of a file under `../src`.
fn parsed(file: &str) -> std::rc::Rc<File> {
    PARSED.with(|p| {
        p.borrow_mut()
            .entry(file.to_string())
            .or_insert_with(|| {
                let source =
                    std::fs::read_to_string(format!("../src/{file}")).expect("a source file");
                std::rc::Rc::new(syn::parse_file(&source).expect("the source parses"))
            })
            .clone()
    })
}

/// The generated module that holds the copies of a file's items.
fn module_name(file: &str) -> String {
    file.trim_end_matches(".rs").replace(['/', '.'], "_")
}

/// The longest prefix of `module` that code outside the crate can name (each step a `pub mod`):
/// a private module's public items are re-exported by its parent.
fn public_prefix(module: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for seg in module {
        let Some(parent) = file_of(&out) else { break };
        let public = parsed(&parent).items.iter().any(|i| {
            matches!(i, Item::Mod(m) if m.ident == seg.as_str()
                && matches!(m.vis, syn::Visibility::Public(_)))
        });
        if !public {
            break;
        }
        out.push(seg.clone());
    }
    out
}

/// Where a path written in the module `from` starts: the module its first steps name
/// (`crate::`, `super::`, `self::`, or a child module of `from` with a file of its own) and the
/// steps after them; `None` for a path into another crate or a local name.
fn anchored(from: &[String], segments: &[String]) -> Option<(Vec<String>, Vec<String>)> {
    let (first, rest) = segments.split_first()?;
    let mut module: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        "self" => from.to_vec(),
        _ if rest.is_empty() => return None,
        _ => {
            let mut child = from.to_vec();
            child.push(first.clone());
            file_of(&child)?;
            child
        }
    };
    let mut rest = rest;
    while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
        module.pop();
        rest = tail;
    }
    Some((module, rest.to_vec()))
}

/// Whether a visibility is `pub` (not `pub(crate)`, `pub(super)` or private).
fn is_public(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

/// The item that the steps `rest` name from the module `module`, when code outside the crate
/// cannot reach it (`pub(crate)`, `pub(super)` or private; any item of a module it cannot reach,
/// when `unreachable`): the file that defines it, its name, and its step's index in `rest`. A
/// name the module imports privately (`use` without `pub`) is followed to where it leads.
fn locate(
    module: &[String],
    rest: &[String],
    unreachable: bool,
) -> Option<(String, String, usize)> {
    let mut module = module.to_vec();
    for (i, name) in rest.iter().enumerate() {
        let file = file_of(&module)?;
        let items = &parsed(&file).items;
        for item in items.iter() {
            let hidden = match item {
                Item::Fn(f) if f.sig.ident == name.as_str() => !is_public(&f.vis),
                Item::Const(c) if c.ident == name.as_str() => !is_public(&c.vis),
                Item::Struct(t) if t.ident == name.as_str() => !is_public(&t.vis),
                Item::Enum(e) if e.ident == name.as_str() => !is_public(&e.vis),
                _ => continue,
            };
            return (hidden || unreachable).then(|| (file, name.clone(), i));
        }
        for item in items.iter() {
            let Item::Use(u) = item else { continue };
            if is_public(&u.vis) {
                continue;
            }
            let mut leaves = Vec::new();
            flatten(&u.tree, &mut Vec::new(), &mut leaves);
            for (path, tail) in leaves {
                let alias = tail.strip_prefix(" as ").or(path.last().map(String::as_str));
                if tail != "::*" && alias == Some(name.as_str()) {
                    let (f, n, _) = restricted(&module, &path)?;
                    return Some((f, n, i));
                }
            }
        }
        module.push(name.clone());
    }
    None
}

/// Where a path written in the module `from` (`crate::…`, `super::…`, `self::…`, or through a
/// child module) leads when it names a function, constant or type that code outside the crate
/// cannot reach (`pub(crate)`, `pub(super)` or private): the file that defines it, its name, and
/// the index of its step in `segments`.
fn restricted(from: &[String], segments: &[String]) -> Option<(String, String, usize)> {
    let (module, rest) = anchored(from, segments)?;
    let skipped = segments.len() - rest.len();
    locate(&module, &rest, false).map(|(f, n, i)| (f, n, skipped + i))
}

/// The module a `use` path written in the module `from` imports, when it is a module with a file
/// of its own that code outside the crate cannot reach (`use super::pack;` of a private `pack`).
fn private_module(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let (mut module, rest) = anchored(from, path)?;
    module.extend(rest);
    file_of(&module)?;
    (public_prefix(&module).len() < module.len()).then_some(module)
}

/// One `use` tree flattened: each path with its last step (`name`, `name as alias` or `*`).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push((path, String::new()));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push((path, format!(" as {}", r.rename)));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "::*".into())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// Rewrites the paths of copied code that name crate-private functions or constants to the
/// generated module that copies them, and lists the files those modules copy.
struct Redirect<'a> {
    module: Vec<String>,
    /// The private modules the file imports by name (`use super::pack;`): name → module path.
    aliases: &'a std::collections::BTreeMap<String, Vec<String>>,
    needed: &'a mut Vec<(String, String)>,
}

impl VisitMut for Redirect<'_> {
    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        visit_mut::visit_path_mut(self, path);
        if path.leading_colon.is_some() {
            return;
        }
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        // A path through a private module the file imports: that module's copy is imported
        // under the same name, so the path stays; the item it names is asked for.
        if let Some(module) = segments.first().and_then(|f| self.aliases.get(f)) {
            let found = locate(module, &segments[1..], true);
            if let Some((file, name, 0)) = found {
                self.needed.push((file, name));
                return;
            }
        }
        if let Some((file, name, at)) = restricted(&self.module, &segments) {
            let tail: Vec<syn::PathSegment> = path.segments.iter().skip(at).cloned().collect();
            let helper = syn::Ident::new(&module_name(&file), proc_macro2::Span::call_site());
            *path = syn::parse_quote!(GENERATED_ROOT::#helper::#(#tail)::*);
            self.needed.push((file, name));
        }
    }
}

/// The name of a type in an `impl` header (`AttnSpec` of `AttnSpec<T>`).
fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// Every identifier in `tokens`.
fn mentions(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Ident(i) => {
                out.insert(i.to_string());
            }
            proc_macro2::TokenTree::Group(g) => mentions(g.stream(), out),
            _ => {}
        }
    }
}

/// What a [`Piece`] is.
enum Kind {
    /// A `use` leaf or a constant, copied as is.
    Copied(TokenStream),
    /// A function.
    Fn(syn::ItemFn),
    /// A method: its `impl` (an index into the file's list) and the function.
    Method(usize, syn::ImplItemFn),
    /// The inherent `impl` of a crate-private type copied with the type.
    Impl(syn::ItemImpl),
}

/// One item a module may copy: a `use` leaf, a function, a constant or a method.
struct Piece {
    /// The name code calls it by (`Type::method` for a method).
    name: String,
    /// The name a call mentions (the method's own name for a method).
    called: String,
    /// A root: a function mutated, or an item another module asks for.
    root: bool,
    /// The identifiers it mentions (a piece is copied when a copied piece mentions its name).
    mentions: BTreeSet<String>,
    /// The crate-private items of other files it reaches: (file, name).
    asks: Vec<(String, String)>,
    /// What it is.
    kind: Kind,
}

/// The pieces `from` reaches by name (itself included).
fn reach(pieces: &[Piece], from: &[usize]) -> Vec<bool> {
    let mut copied = vec![false; pieces.len()];
    for &i in from {
        copied[i] = true;
    }
    loop {
        let mut named = BTreeSet::new();
        for (p, _) in pieces.iter().zip(&copied).filter(|(_, c)| **c) {
            named.extend(p.mentions.iter().cloned());
        }
        let mut grew = false;
        for (p, c) in pieces.iter().zip(copied.iter_mut()) {
            if !*c && !p.called.is_empty() && named.contains(&p.called) {
                *c = true;
                grew = true;
            }
        }
        if !grew {
            return copied;
        }
    }
}

/// The copies of one file: of its `use` items, functions, constants and inherent methods, the
/// roots (`roots`: functions, or `Type::method`) and what they reach by name. The functions
/// named in `mutated`, and the private functions and methods of the file they reach, are wrapped
/// in their switches (each site recorded with the roots that reach it); a method is copied in an
/// extension trait (`pub(crate) trait Ext_…`, which a method call prefers to an inherent method it
/// cannot reach). Returns the module's body, its traits, and the crate-private items of other
/// files it asks for.
fn copy_file(
    file: &str,
    roots: &[String],
    mutated: &[&str],
    next: &mut u32,
    all_sites: &mut Vec<(String, Site)>,
) -> (TokenStream, Vec<String>, Vec<(String, String)>) {
    let module = module_of(file);
    let parsed = parsed(file);
    let locals: Vec<String> = parsed
        .items
        .iter()
        .filter_map(|i| if let Item::Mod(m) = i { Some(m.ident.to_string()) } else { None })
        .collect();
    let public = |v: &syn::Visibility| matches!(v, syn::Visibility::Public(_));
    let mut pieces: Vec<Piece> = Vec::new();
    let mut impls: Vec<syn::ItemImpl> = Vec::new();
    let piece = |name: String, called: String, tokens: TokenStream, asks, kind| {
        let mut m = BTreeSet::new();
        mentions(tokens, &mut m);
        m.remove(&called);
        let root = roots.contains(&name) || called.is_empty();
        Piece { name, called, root, mentions: m, asks, kind }
    };
    // The private modules the file imports by name (`use super::pack;`), which the copies reach
    // through their own copies, imported under the same names.
    let mut aliases = std::collections::BTreeMap::new();
    for item in &parsed.items {
        let Item::Use(u) = item else { continue };
        let mut leaves = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut leaves);
        for (path, tail) in leaves.into_iter().filter(|(_, t)| t != "::*") {
            if let Some(m) = private_module(&module, &path) {
                let name = tail.strip_prefix(" as ").map(String::from);
                aliases.insert(name.or(path.last().cloned()).unwrap_or_default(), m);
            }
        }
    }
    for item in &parsed.items {
        let mut item = item.clone();
        let mut asks = Vec::new();
        let aliases = &aliases;
        Redirect { module: module.clone(), aliases, needed: &mut asks }.visit_item_mut(&mut item);
        match item {
            Item::Use(u) => {
                let mut leaves = Vec::new();
                flatten(&u.tree, &mut Vec::new(), &mut leaves);
                for (path, tail) in leaves {
                    // A child module's re-export: the public module's glob import has it.
                    if path.first().is_some_and(|f| locals.contains(f)) {
                        continue;
                    }
                    // A glob (called by no name) is always kept; a name when a copy mentions it.
                    let name = match tail.strip_prefix(" as ") {
                        Some(alias) => alias.to_string(),
                        None if tail == "::*" => String::new(),
                        None => path.last().cloned().unwrap_or_default(),
                    };
                    let private = private_module(&module, &path).and_then(|m| file_of(&m));
                    let (text, asks) = match restricted(&module, &path) {
                        _ if tail != "::*" && private.is_some() => {
                            let copy = module_name(&private.unwrap_or_default());
                            (format!("use GENERATED_ROOT::{copy} as {name};"), Vec::new())
                        }
                        Some((f, item, _)) if tail != "::*" => (
                            format!("use GENERATED_ROOT::{}::{item}{tail};", module_name(&f)),
                            vec![(f, item)],
                        ),
                        _ => (format!("use {}{tail};", path.join("::")), Vec::new()),
                    };
                    let tokens = text.parse::<TokenStream>().expect("a use item");
                    let kind = Kind::Copied(tokens.clone());
                    pieces.push(piece(name.clone(), name, tokens, asks, kind));
                }
            }
            Item::Fn(f) if public(&f.vis) && !roots.contains(&f.sig.ident.to_string()) => {}
            Item::Fn(mut f) => {
                let name = f.sig.ident.to_string();
                f.attrs.retain(|a| !a.path().is_ident("doc") && !a.path().is_ident("test"));
                if f.attrs.iter().any(|a| a.path().is_ident("cfg")) {
                    continue;
                }
                if !mutated.contains(&name.as_str()) {
                    f.vis = syn::parse_quote!(pub(crate));
                }
                pieces.push(piece(name.clone(), name, f.to_token_stream(), asks, Kind::Fn(f)));
            }
            Item::Const(mut c) if !public(&c.vis) || roots.contains(&c.ident.to_string()) => {
                c.attrs.retain(|a| !a.path().is_ident("doc"));
                c.vis = syn::parse_quote!(pub(crate));
                let name = c.ident.to_string();
                let tokens = c.to_token_stream();
                pieces.push(piece(name.clone(), name, tokens.clone(), asks, Kind::Copied(tokens)));
            }
            // A crate-private type, copied as a type of its own (its fields and variants as
            // they are), with its inherent methods (below).
            Item::Struct(mut t) if !public(&t.vis) => {
                t.attrs.retain(|a| !a.path().is_ident("doc"));
                t.fields.iter_mut().for_each(|f| f.attrs.retain(|a| !a.path().is_ident("doc")));
                t.vis = syn::parse_quote!(pub(crate));
                let (name, tokens) = (t.ident.to_string(), t.to_token_stream());
                let mut p =
                    piece(name.clone(), name.clone(), tokens.clone(), asks, Kind::Copied(tokens));
                p.mentions.insert(format!("impl {name}"));
                pieces.push(p);
            }
            Item::Enum(mut e) if !public(&e.vis) => {
                e.attrs.retain(|a| !a.path().is_ident("doc"));
                e.variants.iter_mut().for_each(|v| v.attrs.retain(|a| !a.path().is_ident("doc")));
                e.vis = syn::parse_quote!(pub(crate));
                let (name, tokens) = (e.ident.to_string(), e.to_token_stream());
                let mut p =
                    piece(name.clone(), name.clone(), tokens.clone(), asks, Kind::Copied(tokens));
                p.mentions.insert(format!("impl {name}"));
                pieces.push(p);
            }
            Item::Impl(imp) if imp.trait_.is_none() => {
                let Some(ty) = type_name(&imp.self_ty) else { continue };
                if imp.attrs.iter().any(|a| a.path().is_ident("cfg")) {
                    continue;
                }
                // A crate-private type's methods: an inherent `impl` of its copy, copied with it.
                let hidden = parsed.items.iter().any(|i| match i {
                    Item::Struct(s) => s.ident == ty.as_str() && !public(&s.vis),
                    Item::Enum(e) => e.ident == ty.as_str() && !public(&e.vis),
                    _ => false,
                });
                if hidden {
                    let mut imp = imp.clone();
                    imp.attrs.retain(|a| !a.path().is_ident("doc"));
                    for it in &mut imp.items {
                        if let syn::ImplItem::Fn(f) = it {
                            f.attrs.retain(|a| !a.path().is_ident("doc"));
                            f.vis = syn::parse_quote!(pub(crate));
                        }
                    }
                    let tokens = imp.to_token_stream();
                    // Copied with the type (whose piece mentions `impl Type`).
                    let name = format!("impl {ty}");
                    pieces.push(piece(name.clone(), name, tokens, asks, Kind::Impl(imp)));
                    continue;
                }
                let (g, t) = (&imp.generics, &imp.self_ty);
                let header = quote!(#g #t);
                for it in &imp.items {
                    let syn::ImplItem::Fn(f) = it else { continue };
                    let called = f.sig.ident.to_string();
                    let name = format!("{ty}::{called}");
                    if public(&f.vis) && !roots.contains(&name) {
                        continue;
                    }
                    let mut f = f.clone();
                    f.attrs.retain(|a| !a.path().is_ident("doc"));
                    f.vis = syn::Visibility::Inherited;
                    f.sig.constness = None;
                    let tokens = quote!(#f #header);
                    let kind = Kind::Method(impls.len(), f);
                    pieces.push(piece(name, called, tokens, asks.clone(), kind));
                }
                impls.push(imp);
            }
            _ => {}
        }
    }
    // What the roots reach by name, and which roots reach each piece.
    let root_list: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].root).collect();
    let copied = reach(&pieces, &root_list);
    let by_root: Vec<(String, Vec<bool>)> = mutated
        .iter()
        .filter_map(|m| pieces.iter().position(|p| p.name == *m))
        .map(|i| (pieces[i].name.clone(), reach(&pieces, &[i])))
        .collect();
    let mut body = TokenStream::new();
    let mut asks = Vec::new();
    let mut traits = Vec::new();
    let mut methods: Vec<(TokenStream, TokenStream)> = vec![Default::default(); impls.len()];
    for (i, p) in pieces.iter().enumerate().filter(|(i, _)| copied[*i]) {
        asks.extend(p.asks.iter().cloned());
        // The roots whose mutants this piece carries: the functions mutated that reach it.
        let from: Vec<String> =
            by_root.iter().filter(|(_, r)| r[i]).map(|(n, _)| n.clone()).collect();
        let mut mutate_as = |block: &mut syn::Block, function: String| {
            if from.is_empty() {
                return;
            }
            let mut m = Mutator { next: &mut *next, function, sites: Vec::new() };
            m.visit_block_mut(block);
            all_sites.extend(
                m.sites.into_iter().map(|s| (file.to_string(), Site { roots: from.clone(), ..s })),
            );
        };
        let mut mutate = |block: &mut syn::Block| mutate_as(block, p.name.clone());
        match &p.kind {
            Kind::Copied(t) => body.extend(t.clone()),
            Kind::Fn(f) => {
                let mut f = f.clone();
                mutate(&mut f.block);
                f.to_tokens(&mut body);
            }
            Kind::Impl(imp) => {
                let mut imp = imp.clone();
                let ty = type_name(&imp.self_ty).unwrap_or_default();
                for it in &mut imp.items {
                    if let syn::ImplItem::Fn(f) = it {
                        mutate_as(&mut f.block, format!("{ty}::{}", f.sig.ident));
                    }
                }
                imp.to_tokens(&mut body);
            }
            Kind::Method(k, f) => {
                let mut f = f.clone();
                mutate(&mut f.block);
                // The trait's declaration names no patterns.
                let mut sig = f.sig.clone();
                for arg in &mut sig.inputs {
                    if let syn::FnArg::Typed(t) = arg {
                        *t.pat = syn::parse_quote!(_);
                    }
                }
                methods[*k].0.extend(quote!(#sig;));
                f.to_tokens(&mut methods[*k].1);
            }
        }
    }
    for (imp, (sigs, fns)) in impls.iter().zip(methods) {
        if fns.is_empty() {
            continue;
        }
        let ty = type_name(&imp.self_ty).unwrap_or_default();
        let name = syn::Ident::new(
            &format!("Ext_{}_{}_{}", module_name(file), ty, traits.len()),
            proc_macro2::Span::call_site(),
        );
        let params = &imp.generics.params;
        let where_clause = &imp.generics.where_clause;
        let (impl_generics, type_generics, _) = imp.generics.split_for_impl();
        let self_ty = &imp.self_ty;
        body.extend(quote! {
            pub(crate) trait #name<#params>: Sized #where_clause { #sigs }
            impl #impl_generics #name #type_generics for #self_ty #where_clause { #fns }
        });
        traits.push(name.to_string());
    }
    (body, traits, asks)
}

/// The generated file: the switch, then one module per source file (the files mutated, then the
/// files whose crate-private items they reach), then every module's extension traits in scope.
fn generate() -> String {
    // The crate-private items each file is asked for, grown until the copies ask for no more.
    let mut asked: BTreeSet<(String, String)> = BTreeSet::new();
    loop {
        let (out, asks) = generate_asked(&asked);
        let before = asked.len();
        asked.extend(asks);
        if asked.len() == before {
            return out;
        }
    }
}

/// The generated file, with the crate-private items of other files in `asked` copied, and what
/// the copies ask for.
fn generate_asked(asked: &BTreeSet<(String, String)>) -> (String, Vec<(String, String)>) {
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
    let mut asks = Vec::new();
    let mut all_traits = Vec::new();
    let emit = |out: &mut String, path: &str, glob: &str, body: TokenStream, what: &str| {
        let module = module_name(path);
        let module_path = module_of(path);
        let parent = module_path[..module_path.len() - 1].join("::");
        let body = rewrite(body.to_string(), &parent).replace("GENERATED_ROOT ::", "super ::");
        out.push_str(&format!(
            "/// {what} `src/{path}`.\npub mod {module} {{\n    use super::on;\n    \
             #[allow(unused_imports)]\n    use super::ext::*;\n    #[allow(unused_imports)]\n    \
             use llm_workbook::{glob}::*;\n    {body}\n}}\n\n"
        ));
    };
    let of = |path: &str| -> Vec<String> {
        asked.iter().filter(|(f, _)| f == path).map(|(_, n)| n.clone()).collect()
    };
    let mut files: Vec<&str> = Vec::new();
    for (path, _, glob, functions) in TARGETS {
        let mut roots: Vec<String> = functions.iter().map(|f| f.to_string()).collect();
        roots.extend(of(path));
        let (body, traits, a) = copy_file(path, &roots, functions, &mut next, &mut all_sites);
        asks.extend(a);
        all_traits.extend(traits.into_iter().map(|t| (module_name(path), t)));
        emit(&mut out, path, glob, body, "Mutants of");
        files.push(path);
    }
    // The files whose crate-private functions the copies call, copied unmutated.
    let helpers: BTreeSet<&String> =
        asked.iter().map(|(f, _)| f).filter(|f| !files.contains(&f.as_str())).collect();
    for path in helpers {
        let (body, traits, a) = copy_file(path, &of(path), &[], &mut next, &mut all_sites);
        asks.extend(a);
        all_traits.extend(traits.into_iter().map(|t| (module_name(path), t)));
        let glob = public_prefix(&module_of(path)).join("::");
        emit(&mut out, path, &glob, body, "The crate-private items of");
    }
    out.push_str("/// The copies' private methods, in scope in every module.\npub mod ext {\n");
    for (module, t) in &all_traits {
        out.push_str(&format!("    pub(crate) use super::{module}::{t};\n"));
    }
    out.push_str("}\n\n");
    out.push_str("/// Every mutant: its number, the file, the function, the functions behind the exercises that run it, and what changes.\n");
    out.push_str("pub const MUTANTS: &[(u32, &str, &str, &[&str], &str)] = &[\n");
    for (path, s) in &all_sites {
        out.push_str(&format!(
            "    ({}, {:?}, {:?}, &{:?}, {:?}),\n",
            s.id, path, s.function, s.roots, s.what
        ));
    }
    out.push_str("];\n\n/// The exercises whose function is not mutated, and why.\n");
    out.push_str("pub const NOT_MUTATED: &[(&str, &str)] = &[\n");
    for (name, why) in NOT_MUTATED {
        out.push_str(&format!("    ({name:?}, {why:?}),\n"));
    }
    out.push_str("];\n");
    (out, asks)
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
