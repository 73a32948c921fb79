//! The five source documents, by short id.
//!
//! The workbook checks numbers, formulas and facts printed in five texts that are not part of the
//! repository (they are not ours to licence). Every chapter, worked-number row and erratum names a
//! document by its short id (`D0` to `D4`) from this one table, never by a file name; the book's
//! sources page says the same in prose.
//!
//! Titles are the documents' own first headings. Where a document names no author, the table says
//! so rather than guess.
//!
//! ```
//! use llm_workbook::sources::{D3, SOURCES};
//!
//! assert_eq!(D3.id, "D3");
//! assert_eq!(D3.title, "The Math Behind GPT Models (Rough Draft)");
//! assert_eq!(SOURCES.len(), 5);
//! ```

use std::fmt;

/// One source document.
#[derive(Debug, PartialEq, Eq)]
pub struct Source {
    /// The short id used everywhere: `D0` to `D4`.
    pub id: &'static str,
    /// The title as the document states it (its first heading).
    pub title: &'static str,
    /// The author as the document states it, or that it names none.
    pub author: &'static str,
    /// What kind of text it is.
    pub kind: &'static str,
}

/// The author cell of a document that names no author.
pub const NO_AUTHOR: &str = "not stated in the document";

/// D0: notes on logistic regression, binary cross-entropy, softmax, neural networks and
/// backpropagation, ending with embeddings, attention and the MLP of a transformer.
pub const D0: &Source = &Source {
    id: "D0",
    title: "Logistic Regression",
    author: NO_AUTHOR,
    kind: "study notes: logistic regression, BCE, softmax, backpropagation, then transformers",
};

/// D1: an explainer of GPT-3 for beginners (embeddings, attention, the MLP, softmax and
/// temperature), with GPT-3's matrix sizes and parameter counts.
pub const D1: &Source = &Source {
    id: "D1",
    title: "LLMs for curious beginners",
    author: "not stated (it credits Grant Sanderson's 3Blue1Brown series)",
    kind: "explainer of GPT-3 with its matrix sizes and parameter counts",
};

/// D2: lecture slides on transformer architectures (attention, multi-head attention,
/// LayerNorm, positional encoding, tokenization).
pub const D2: &Source = &Source {
    id: "D2",
    title: "Large Language Model Architectures 01 (Stat 9911, Principles of AI: LLMs)",
    author: "Edgar Dobriban, Wharton School, University of Pennsylvania (January 21, 2025)",
    kind: "lecture slides: attention, transformers, LayerNorm",
};

/// D3: a long worked walk-through of an encoder–decoder transformer on "You are welcome" →
/// "de nada", every matrix printed.
pub const D3: &Source = &Source {
    id: "D3",
    title: "The Math Behind GPT Models (Rough Draft)",
    author: NO_AUTHOR,
    kind: "worked walk-through of a small encoder-decoder transformer, every matrix printed",
};

/// D4: notes on how the MLP of a transformer might store a fact ("Michael Jordan plays
/// basketball").
pub const D4: &Source = &Source {
    id: "D4",
    title: "Multi Layer Perceptron",
    author: NO_AUTHOR,
    kind: "talk notes: how an MLP block might store a fact",
};

/// Not a document: a result the workbook states about its own code (an accuracy its prose
/// reports, a count its chapter derives). Rows with this origin check our prose, not a source.
pub const THIS_CRATE: &Source = &Source {
    id: "this crate",
    title: "the workbook's own statement",
    author: "llm-workbook",
    kind: "a number our chapter page states about our own results",
};

/// Not a document: NumPy's documented output, for the random draws D3's Python cells make.
pub const NUMPY: &Source = &Source {
    id: "numpy",
    title: "NumPy's legacy random generator (MT19937)",
    author: "the NumPy project",
    kind: "reference output of a library the documents' code calls",
};

/// All five documents, in order of their ids.
pub const SOURCES: [&Source; 5] = [D0, D1, D2, D3, D4];

impl fmt::Display for Source {
    /// The short id, as tables print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id)
    }
}

impl Source {
    /// The id with the title in quotes, as prose cites it: `D3, "The Math Behind GPT Models
    /// (Rough Draft)"`.
    pub fn citation(&self) -> String {
        format!("{}, \"{}\"", self.id, self.title)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_in_order() {
        for (i, s) in SOURCES.iter().enumerate() {
            assert_eq!(s.id, format!("D{i}"));
        }
    }

    #[test]
    fn a_source_displays_as_its_id_and_cites_its_title() {
        assert_eq!(D2.to_string(), "D2");
        assert_eq!(D4.citation(), "D4, \"Multi Layer Perceptron\"");
    }
}
