//! Unicode formulas as the pages write them: `$…$` TeX in the subset GitHub renders.
//!
//! The worked-number and errata tables are written once, in Unicode, because the terminal shows
//! them (`σ(w·x + b)`, `Ē·(M + J) − 1`, `1/√d_k`). The chapter pages carry the same rows in the
//! notation of the rest of the book, so [`markdown_cell`] finds the formulas in a cell (runs of
//! words that hold a mathematical symbol, an index or an operator, with the numbers and single
//! letters between them) and writes each run as one `$…$` span; the words around them stay text.

/// Greek letters and symbols with the TeX command that writes them.
const SYMBOLS: [(char, &str); 48] = [
    ('α', "\\alpha"),
    ('β', "\\beta"),
    ('γ', "\\gamma"),
    ('δ', "\\delta"),
    ('ε', "\\epsilon"),
    ('η', "\\eta"),
    ('θ', "\\theta"),
    ('λ', "\\lambda"),
    ('μ', "\\mu"),
    ('ν', "\\nu"),
    ('π', "\\pi"),
    ('ρ', "\\rho"),
    ('σ', "\\sigma"),
    ('τ', "\\tau"),
    ('φ', "\\phi"),
    ('ω', "\\omega"),
    ('Δ', "\\Delta"),
    ('Σ', "\\Sigma"),
    ('∑', "\\sum"),
    ('∂', "\\partial"),
    ('∇', "\\nabla"),
    ('⊙', "\\odot"),
    ('·', "\\cdot"),
    ('×', "\\times"),
    ('−', "-"),
    ('≤', "\\le"),
    ('≥', "\\ge"),
    ('≠', "\\ne"),
    ('≈', "\\approx"),
    ('∞', "\\infty"),
    ('→', "\\to"),
    ('∈', "\\in"),
    ('ᵀ', "^\\top"),
    ('ŷ', "\\hat y"),
    ('Ē', "\\bar E"),
    ('ē', "\\bar e"),
    ('≡', "\\equiv"),
    ('∝', "\\propto"),
    ('⌈', "\\lceil"),
    ('⌉', "\\rceil"),
    ('÷', "\\div"),
    ('↦', "\\mapsto"),
    ('←', "\\leftarrow"),
    ('Ã', "\\tilde A"),
    ('…', "\\dots"),
    ('ℒ', "\\mathcal{L}"),
    ('Π', "\\prod"),
    ('′', "'"),
];

/// Subscript and superscript digits and signs, with the plain character each stands for.
const SUBSCRIPTS: [(char, char); 18] = [
    ('₀', '0'),
    ('₁', '1'),
    ('₂', '2'),
    ('₃', '3'),
    ('₄', '4'),
    ('₅', '5'),
    ('₆', '6'),
    ('₇', '7'),
    ('₈', '8'),
    ('₉', '9'),
    ('ᵢ', 'i'),
    ('ⱼ', 'j'),
    ('ₖ', 'k'),
    ('ₙ', 'n'),
    ('ᵤ', 'u'),
    ('ₒ', 'o'),
    ('ₓ', 'x'),
    ('ᵥ', 'v'),
];
const SUPERSCRIPTS: [(char, char); 15] = [
    ('⁰', '0'),
    ('¹', '1'),
    ('²', '2'),
    ('³', '3'),
    ('⁴', '4'),
    ('⁵', '5'),
    ('⁶', '6'),
    ('⁷', '7'),
    ('⁸', '8'),
    ('⁹', '9'),
    ('⁻', '-'),
    ('ⁿ', 'n'),
    ('⁽', '('),
    ('⁾', ')'),
    ('ᴸ', 'L'),
];

/// Function names written upright (`\ln x`, `\mathrm{softmax}(z)`).
const OPERATORS: [&str; 6] = ["ln", "log", "exp", "max", "min", "sin"];

fn sub(c: char) -> Option<char> {
    SUBSCRIPTS.iter().find(|(u, _)| *u == c).map(|(_, p)| *p)
}
fn sup(c: char) -> Option<char> {
    SUPERSCRIPTS.iter().find(|(u, _)| *u == c).map(|(_, p)| *p)
}
fn symbol(c: char) -> Option<&'static str> {
    SYMBOLS.iter().find(|(u, _)| *u == c).map(|(_, t)| *t)
}

/// Whether a word (without its trailing punctuation) is part of a formula on its own: it holds a
/// symbol, an index or power, an `=`/`+`/`/` operator, or a combining accent.
fn mathy(word: &str) -> bool {
    if code_name(word) {
        return false;
    }
    word.chars().any(|c| {
        symbol(c).is_some()
            || sub(c).is_some()
            || sup(c).is_some()
            || c == '√'
            || ('\u{300}'..='\u{36f}').contains(&c)
            || (c == '_' || c == '^') && word.len() > 1
    }) || matches!(word, "=" | "+" | "/" | "<" | ">")
}

/// Whether a word (brackets and punctuation around it aside) is the name of a function or
/// variable of the code, such as `lane_sum`: snake case whose first part is a word of two
/// or more letters. An index on one letter, `y_ik`, `d_k`, `W_Q`, stays a formula.
fn code_name(word: &str) -> bool {
    let bare = word.trim_matches(|c: char| "(),[]{}:;.".contains(c));
    let parts: Vec<&str> = bare.split('_').collect();
    parts.len() > 1
        && parts[0].len() > 1
        && parts.iter().all(|p| {
            !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// `word` with the code name in it in backticks, `(lane_sum)` → ``(`lane_sum`)``, so that a
/// table cell shows it as code rather than as `lane` with the subscript `sum`.
fn as_code(word: &str) -> String {
    let start = word.find(|c: char| c.is_ascii_alphanumeric()).unwrap_or(0);
    let end = word.rfind(|c: char| c.is_ascii_alphanumeric()).map_or(word.len(), |i| i + 1);
    format!("{}`{}`{}", &word[..start], &word[start..end], &word[end..])
}

/// Whether a word may sit inside a formula next to formula words: a number, a single letter,
/// a bracket, a function name (`max(0,`) or a short name in capitals (`LN`, `FFN`).
fn bridge(word: &str) -> bool {
    let bare = word.trim_matches(|c: char| "(),[]{}:;".contains(c));
    let call = bare
        .split_once('(')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic()));
    bare.is_empty()
        || bare.parse::<f64>().is_ok()
        || bare.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '.')
        || (bare.chars().count() == 1 && bare.chars().all(char::is_alphabetic) && bare != "a")
        || OPERATORS.iter().any(|op| bare == *op || bare.starts_with(&format!("{op}(")))
        || (2..=4).contains(&bare.len()) && bare.chars().all(|c| c.is_ascii_uppercase())
        || call && !bare.contains("((")
}

/// `text` for the terminal: each `^{…}` and `_{…}` group written in Unicode superscripts or
/// subscripts where every character of it has one (`2^{10}` → `2¹⁰`, `x_{12}` → `x₁₂`), and as
/// `^(…)` or `_(…)` where one has none (`2^{-F}` → `2^(−F)`, `ε^{1/3}` → `ε^(1/3)`): no brace of
/// TeX is left for the reader to decode.
pub fn terminal_text(text: &str) -> String {
    // Characters with a Unicode superscript (subscript), and that form, in the same order.
    const SUP: (&str, &str) = ("0123456789+-−()ni", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻⁽⁾ⁿⁱ");
    const SUB: (&str, &str) = ("0123456789+-−i", "₀₁₂₃₄₅₆₇₈₉₊₋₋ᵢ");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['^', '_']) {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let mark = tail.chars().next().unwrap_or('^');
        let Some(group) = tail[1..].strip_prefix('{').and_then(|g| g.find('}').map(|e| &g[..e]))
        else {
            out.push(mark);
            rest = &tail[1..];
            continue;
        };
        let (from, to) = if mark == '^' { SUP } else { SUB };
        let small: Option<String> = group
            .chars()
            .map(|c| from.chars().position(|f| f == c).and_then(|k| to.chars().nth(k)))
            .collect();
        match small {
            Some(small) if !group.is_empty() => out.push_str(&small),
            _ => out.push_str(&format!("{mark}({})", group.replace('-', "−"))),
        }
        rest = &tail[1 + 1 + group.len() + 1..];
    }
    out.push_str(rest);
    out
}

/// A cell of a generated table with each formula in it written as `$…$` TeX; text without
/// formulas is returned unchanged, and so is a cell holding `|`, `$` or code.
pub fn markdown_cell(text: &str) -> String {
    if text.contains('|') || text.contains('$') || text.contains('`') {
        return text.to_string();
    }
    let words: Vec<&str> = text.split(' ').collect();
    let is_math: Vec<bool> = words.iter().map(|w| mathy(strip(w).0)).collect();
    // Runs: from a formula word to the last formula word reachable through bridging words.
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    let mut free = 0; // words before this index are already inside an emitted formula
    while i < words.len() {
        if !is_math[i] {
            out.push(if code_name(words[i]) { as_code(words[i]) } else { words[i].to_string() });
            i += 1;
            continue;
        }
        // Widen to the left over bridging words already emitted (a single letter before `=`).
        let mut start = i;
        // `a` is an article, except as the left operand of a bare operator (`a < b`).
        let operand = |w: &str| bridge(w) || w == "a" && matches!(words[i], "<" | ">" | "=" | "+");
        while start > free && operand(words[start - 1]) && !words[start - 1].is_empty() {
            start -= 1;
            out.pop();
        }
        // A word ending in `:` ends the formula (`X·W: 768×128` is a name, then a shape).
        let colon = |k: usize| words[k].ends_with(':');
        let mut end = i;
        let mut j = i + 1;
        while j < words.len() && !colon(j - 1) {
            if is_math[j] {
                end = j;
            } else if !bridge(words[j]) {
                break;
            }
            j += 1;
        }
        // Bridges after the last formula word join only when they close a bracket it opened or
        // are operands of a trailing operator (`= 0.5`).
        while end + 1 < words.len()
            && !colon(end)
            && bridge(words[end + 1])
            && (ends_with_operator(words[end]) || open_brackets(&words[start..=end]) > 0)
        {
            end += 1;
        }
        // A word inside the run that opens a bracket the run never closes ends the run before
        // it (`T = 0.001 (T = 0 itself …`); a bracket opened in the first word and closed after
        // the run takes the words up to its close into the formula (`σ(weighted sum − 10)`).
        if let Some(k) = (start + 1..=end)
            .find(|&k| words[k].starts_with('(') && open_brackets(&words[k..=end]) > 0)
        {
            end = k - 1;
        }
        while open_brackets(&words[start..=end]) > 0
            && !words[start].starts_with('(')
            && end + 1 < words.len()
        {
            end += 1;
        }
        let run = words[start..=end].join(" ");
        let (body, tail) = strip(&run);
        let (lead, body) = split_lead(body);
        // Closing brackets the formula did not open stay outside it: `(first W_V)`.
        let mut body = body;
        let mut closes = String::new();
        while body.ends_with(')') && body.matches(')').count() > body.matches('(').count() {
            body = &body[..body.len() - 1];
            closes.push(')');
        }
        out.push(format!("{lead}${}${closes}{tail}", to_tex(body)));
        i = end + 1;
        free = i;
    }
    out.join(" ")
}

/// A word without its trailing `,`, `;`, `:` or `.` (a sentence's punctuation, not math), and
/// that punctuation.
fn strip(word: &str) -> (&str, &str) {
    let body = word.trim_end_matches([',', ';', ':']);
    let body = body.strip_suffix("'s").unwrap_or(body);
    let body = if body.ends_with('.') && !body.ends_with("..") && body.len() > 1 {
        let inner = &body[..body.len() - 1];
        if inner.chars().last().is_some_and(|c| c.is_ascii_digit()) { body } else { inner }
    } else {
        body
    };
    (body, &word[body.len()..])
}

/// An opening bracket that does not belong to the formula (the run starts with `(` but never
/// closes it): kept outside the `$…$`.
fn split_lead(body: &str) -> (&str, &str) {
    let opens = body.matches('(').count();
    let closes = body.matches(')').count();
    if body.starts_with('(') && opens > closes { ("(", &body[1..]) } else { ("", body) }
}

fn ends_with_operator(word: &str) -> bool {
    matches!(strip(word).0, "=" | "+" | "−" | "·" | "×" | "/" | "≈" | "≤" | "≥" | "<" | ">")
}

fn open_brackets(words: &[&str]) -> i32 {
    let text = words.join(" ");
    let count = |c: char| text.matches(c).count() as i32;
    count('(') + count('[') + count('{') - count(')') - count(']') - count('}')
}

/// One formula from Unicode to TeX, without space at its ends. No `_` is written after a space,
/// `}` or `)`: GitHub's Markdown could open an emphasis there and close it at a later `y_{k}`,
/// so accents take a bare letter (`\hat y_k`) and a sum its index directly (`\sum_{k}`).
///
/// Inside `$…$` a space separates nothing: `(0 0 1 1; 1 1 0 0)` would typeset as `(0011;1100)`.
/// So a bracket of numbers written by rows (`;` between rows, or numpy's `[[…] […]]`) becomes a
/// `pmatrix` (round brackets) or `bmatrix` (square), a formula that is nothing but such rows
/// becomes a `pmatrix`, any other two numbers side by side keep a TeX space (`\ `) between them,
/// and `1e-6` or `2.0e-8` becomes `10^{-6}` or `2.0 \cdot 10^{-8}`.
pub fn to_tex(formula: &str) -> String {
    let trimmed = formula.trim();
    let tex = match rows_tex(trimmed) {
        Some(rows) if trimmed.contains(';') => format!("\\begin{{pmatrix}}{rows}\\end{{pmatrix}}"),
        _ => tex_of(formula).replace("  ", " "),
    };
    tex.trim().to_string()
}

/// A number as the pages print it: digits with an optional `−`/`-` sign and decimals (`0.` too).
fn is_number(token: &str) -> bool {
    let t = token.strip_prefix(['-', '−']).unwrap_or(token);
    t.starts_with(|c: char| c.is_ascii_digit())
        && t.chars().all(|c| c.is_ascii_digit() || c == '.')
        && t.matches('.').count() <= 1
}

/// Rows of numbers, `;` between rows and spaces between entries (`…` for entries or rows left
/// out), as the body of a TeX matrix (`&` between entries, `\\` between rows); `None` unless
/// every entry is a number or `…` and some row holds two numbers or more.
fn rows_tex(text: &str) -> Option<String> {
    rows_of(&text.split(';').collect::<Vec<_>>())
}

fn rows_of(rows: &[&str]) -> Option<String> {
    let mut out = Vec::new();
    let mut wide = false;
    for row in rows {
        let entries: Vec<&str> = row.split_whitespace().collect();
        if entries.is_empty() || !entries.iter().all(|e| is_number(e) || *e == "…") {
            return None;
        }
        wide |= entries.iter().filter(|e| is_number(e)).count() >= 2;
        let tex: Vec<String> = entries
            .iter()
            .map(|e| if *e == "…" { "\\dots".into() } else { e.replace('−', "-") })
            .collect();
        out.push(if tex == ["\\dots"] { "\\vdots".to_string() } else { tex.join(" & ") });
    }
    // `\cr`, not `\\`: GitHub's Markdown eats one backslash of `\\` before the math.
    wide.then(|| out.join(" \\cr "))
}

/// The matrix that the bracket at `at` opens, as TeX, and where the text goes on after it: a
/// `(…)` or `[…]` of rows of numbers ([`rows_tex`]), or numpy's `[[1 2] [3 4]]` with `…` for
/// rows left out. `None` when the bracket holds anything else.
fn matrix_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    let (open, close, env) = match chars.get(at)? {
        '(' => ('(', ')', "pmatrix"),
        '[' => ('[', ']', "bmatrix"),
        _ => return None,
    };
    let mut depth = 0;
    let end = (at..chars.len()).find(|&k| {
        depth += i32::from(chars[k] == open) - i32::from(chars[k] == close);
        depth == 0
    })?;
    let inner: String = chars[at + 1..end].iter().collect();
    let body = if open == '[' && inner.trim_start().starts_with('[') {
        // numpy: each row in brackets of its own, `…` between them for rows left out.
        let rows: Vec<String> = inner
            .split(']')
            .map(|r| r.trim().trim_start_matches('[').trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        rows_of(&rows.iter().map(String::as_str).collect::<Vec<_>>())?
    } else {
        rows_tex(&inner)?
    };
    Some((format!("\\begin{{{env}}}{body}\\end{{{env}}}"), end + 1))
}

/// The number in scientific notation starting at `at` (`1e-6`, `2.0e-8`) as TeX
/// (`10^{-6}`, `2.0 \cdot 10^{-8}`), and where the text goes on after it.
fn exponent_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    if at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '.') {
        return None;
    }
    let mut k = at;
    while k < chars.len() && (chars[k].is_ascii_digit() || chars[k] == '.') {
        k += 1;
    }
    let mantissa: String = chars[at..k].iter().collect();
    if !is_number(&mantissa) || !matches!(chars.get(k), Some('e' | 'E')) {
        return None;
    }
    let mut e = k + 1;
    if matches!(chars.get(e), Some('-' | '+' | '−')) {
        e += 1;
    }
    let digits = chars[e..].iter().take_while(|c| c.is_ascii_digit()).count();
    let after = chars.get(e + digits);
    if digits == 0 || after.is_some_and(|c| c.is_alphanumeric()) {
        return None;
    }
    let power: String = chars[k + 1..e + digits].iter().collect();
    let power: i32 = power.replace('−', "-").parse().ok()?;
    let tex = if mantissa == "1" {
        format!("10^{{{power}}}")
    } else {
        format!("{mantissa} \\cdot 10^{{{power}}}")
    };
    Some((tex, e + digits))
}

fn tex_of(formula: &str) -> String {
    let chars: Vec<char> = formula.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some((tex, next)) = matrix_at(&chars, i).or_else(|| exponent_at(&chars, i)) {
            out.push_str(&tex);
            i = next;
            continue;
        }
        // Two numbers side by side: a TeX space between them, or they would run together.
        if c == ' '
            && out.ends_with(|p: char| p.is_ascii_digit() || p == '.')
            && chars[i + 1..]
                .iter()
                .take_while(|c| !c.is_whitespace())
                .collect::<String>()
                .trim_end_matches([',', ';', ')', ']'])
                .parse::<f64>()
                .is_ok()
        {
            out.push_str("\\ ");
            i += 1;
            continue;
        }
        if c == '√' {
            // √x, √d_k, √(…): the root over the next bracket or identifier.
            let (arg, next) = radicand(&chars, i + 1);
            out.push_str(&format!("\\sqrt{{{}}}", tex_of(&arg)));
            i = next;
            continue;
        }
        // A run of subscript (or superscript) characters: one index (or power) in braces.
        if let Some((mark, plain)) = [('_', sub as fn(char) -> Option<char>), ('^', sup)]
            .into_iter()
            .find(|(_, plain)| plain(c).is_some())
        {
            let digits: String = chars[i..].iter().map_while(|&ch| plain(ch)).collect();
            i += digits.chars().count();
            out.push_str(&format!("{mark}{{{digits}}}"));
            continue;
        }
        if ('\u{300}'..='\u{36f}').contains(&c) {
            i += 1; // an accent on the previous letter, handled there
            continue;
        }
        if let Some(&next) = chars.get(i + 1)
            && c.is_alphabetic()
            && ('\u{300}'..='\u{36f}').contains(&next)
        {
            let accent = match next {
                '\u{302}' => "\\hat",
                '\u{304}' => "\\bar",
                '\u{303}' => "\\tilde",
                _ => "\\dot",
            };
            out.push_str(&format!("{accent} {c}"));
            i += 2;
            continue;
        }
        if c == '_' {
            // An index of two or more letters is a name: P_mat, x_query.
            let name: String = chars[i + 1..].iter().take_while(|c| c.is_alphanumeric()).collect();
            if name.chars().count() > 1 && name.chars().all(char::is_alphabetic) {
                out.push_str(&format!("_{{\\text{{{name}}}}}"));
                i += 1 + name.chars().count();
                continue;
            }
        }
        if c.is_ascii_alphabetic() {
            let word: String = chars[i..].iter().take_while(|c| c.is_ascii_alphabetic()).collect();
            let n = word.len();
            let before_ok = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
            if before_ok && OPERATORS.contains(&word.as_str()) {
                out.push_str(&format!("\\{word} "));
                i += n;
                continue;
            }
            if before_ok && n > 1 && chars.get(i + n) != Some(&'_') {
                if word.chars().all(|c| c.is_ascii_lowercase()) {
                    // Words of text inside a formula, spaces kept: \text{weighted sum}.
                    let mut k = i + n;
                    let mut words = word.clone();
                    loop {
                        let next: String = chars[(k + 1).min(chars.len())..]
                            .iter()
                            .take_while(|c| c.is_ascii_lowercase())
                            .collect();
                        let after = chars.get(k + 1 + next.len());
                        if chars.get(k) == Some(&' ')
                            && next.len() > 1
                            && !OPERATORS.contains(&next.as_str())
                            && !after.is_some_and(|c| c.is_alphanumeric() || *c == '_')
                        {
                            words.push(' ');
                            words.push_str(&next);
                            k += 1 + next.len();
                        } else {
                            break;
                        }
                    }
                    out.push_str(&format!("\\text{{{words}}}"));
                    i = k;
                } else {
                    // An index right after the name goes inside the braces
                    // (`\mathrm{Attention_{2}}`): a `_` after `}` could open an emphasis.
                    let digits: String = chars[i + n..].iter().map_while(|&ch| sub(ch)).collect();
                    let index =
                        if digits.is_empty() { String::new() } else { format!("_{{{digits}}}") };
                    out.push_str(&format!("\\mathrm{{{word}{index}}}"));
                    i += n + digits.chars().count();
                }
                continue;
            }
        }
        if c == ',' && chars.get(i + 1).is_some_and(char::is_ascii_digit) && i > 0 {
            out.push_str("{,}"); // 50,257: a thousands separator, no space after it
            i += 1;
            continue;
        }
        let summed = chars.get(i + 1).is_some_and(|&n| sub(n).is_some() || n.is_alphabetic());
        if c == 'Σ' && summed {
            let letter = chars.get(i + 1).is_some_and(|c| c.is_alphabetic() && sub(*c).is_none());
            out.push_str(if letter { "\\sum " } else { "\\sum" });
            i += 1;
            continue;
        }
        match symbol(c) {
            Some(t) => {
                out.push_str(t);
                let next = chars.get(i + 1).copied();
                // A command's name must not run into the next letter: `w^\top x`, not `\topx`.
                if t.ends_with(|c: char| c.is_ascii_alphabetic())
                    && t.contains('\\')
                    && next.is_some_and(|n| n.is_alphanumeric() && sub(n).is_none())
                {
                    out.push(' ');
                }
            }
            None if c == '%' => out.push_str("\\ \\text{percent}"),
            None => out.push(c),
        }
        i += 1;
    }
    out
}

/// The argument of a root starting at `at`: a bracketed group (without its brackets) or an
/// identifier with its index; and where the text goes on after it.
fn radicand(chars: &[char], at: usize) -> (String, usize) {
    if chars.get(at) == Some(&'(') {
        let mut depth = 0;
        for (k, &c) in chars.iter().enumerate().skip(at) {
            depth += i32::from(c == '(') - i32::from(c == ')');
            if depth == 0 {
                return (chars[at + 1..k].iter().collect(), k + 1);
            }
        }
    }
    let mut k = at;
    while k < chars.len()
        && (chars[k].is_alphanumeric()
            || chars[k] == '_'
            || chars[k] == '.'
            || sub(chars[k]).is_some())
    {
        k += 1;
    }
    (chars[at..k].iter().collect(), k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_become_tex_and_words_stay_text() {
        for (cell, tex) in [
            ("1/√d_k for d_k = 4", "$1/\\sqrt{d_k}$ for $d_k = 4$"),
            ("GPT-1 parameters, millions", "GPT-1 parameters, millions"),
            (
                "FFN = max(0, LN·W₁ + b₁)W₂ + b₂",
                "$\\mathrm{FFN} = \\max (0, \\mathrm{LN}\\cdot W_{1} + b_{1})W_{2} + b_{2}$",
            ),
            (
                "Concat · W_O with W_O all 0.5, row 1",
                "Concat $\\cdot W_O$ with $W_O$ all 0.5, row 1",
            ),
            ("GPT-3 embedding 50,257 × 12,288", "GPT-3 embedding $50{,}257 \\times 12{,}288$"),
            ("a share of ŷ", "a share of $\\hat y$"),
            ("z = wᵀx + b", "$z = w^\\top x + b$"),
            ("Σ_{j=0}^{n_L − 1} terms", "$\\Sigma_{j=0}^{n_L - 1}$ terms"),
            ("Attention₂ and Πᵢ ŷᵢ", "$\\mathrm{Attention_{2}}$ and $\\prod_{i} \\hat y_{i}$"),
            ("Σₖ ŷₖ against −log of", "$\\sum_{k} \\hat y_{k}$ against $-\\log$ of"),
            // A function of the code is code, not `lane` with the subscript `sum`; an index on
            // one letter stays maths.
            ("16 lanes (lane_sum) of y_ik", "16 lanes (`lane_sum`) of $y_{\\text{ik}}$"),
            ("2^{20} values, lane_sum,", "$2^{20}$ values, `lane_sum`,"),
        ] {
            assert_eq!(markdown_cell(cell), tex, "{cell}");
        }
    }

    /// The terminal gets no TeX braces: superscripts where Unicode has them, `^(…)` otherwise.
    #[test]
    fn terminal_text_leaves_no_tex_braces() {
        for (tex, text) in [
            ("machine epsilon 2^{-F} of bf16", "machine epsilon 2^(−F) of bf16"),
            ("ε^{1/3} of f64", "ε^(1/3) of f64"),
            ("2^{20} values, x_{12}, 10^{-6}", "2²⁰ values, x₁₂, 10⁻⁶"),
            ("steps 10^{-k/4}", "steps 10^(−k/4)"),
            ("lane_sum and a^b stay", "lane_sum and a^b stay"),
        ] {
            assert_eq!(terminal_text(tex), text, "{tex}");
        }
    }

    /// Numbers that a space alone separates would run together in typeset math (`(0 0 1 1)`
    /// reads `(0011)`), and `1e-6` typesets as `1e − 6`: matrices, spaces and powers of ten.
    #[test]
    fn matrices_keep_their_entries_apart_and_exponents_are_powers_of_ten() {
        for (cell, tex) in [
            (
                "W_V = (0 0 1 1; 1 1 0 0) beside V = (1.5 0 −1.1 2.6; …)",
                "$W_V = \\begin{pmatrix}0 & 0 & 1 & 1 \\cr 1 & 1 & 0 & 0\\end{pmatrix}$ beside \
                 $V = \\begin{pmatrix}1.5 & 0 & -1.1 & 2.6 \\cr \\vdots\\end{pmatrix}$",
            ),
            (
                "Attention₂(Q, K, V) = [[2.8 2.4] …]",
                "$\\mathrm{Attention_{2}}(Q, K, V) = \\begin{bmatrix}2.8 & 2.4 \\cr \\vdots\
                 \\end{bmatrix}$",
            ),
            (
                "3×4: 4.42 5.58 …; …",
                "$3\\times 4$: $\\begin{pmatrix}4.42 & 5.58 & \\dots \\cr \\vdots\\end{pmatrix}$",
            ),
            (
                "ε = 1e-6 and sin(2) = 2.0e-8",
                "$\\epsilon = 10^{-6}$ and $\\sin (2) = 2.0 \\cdot 10^{-8}$",
            ),
            ("x = 1.5 2.5 …", "$x = 1.5\\ 2.5 \\dots$"),
            (
                "(x − μ)/√(σ² + ε), f(1, 2) = 3",
                "$(x - \\mu)/\\sqrt{\\sigma ^{2} + \\epsilon}, f(1, 2) = 3$",
            ),
        ] {
            assert_eq!(markdown_cell(cell), tex, "{cell}");
        }
    }
}
