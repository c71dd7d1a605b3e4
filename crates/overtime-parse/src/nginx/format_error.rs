//! Why a `log_format` could not be compiled ([`FormatError`]): what and
//! where, for the user who wrote it.

use super::builtins::builtin_names;

/// Why a `log_format` could not be compiled; every variant says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A `'` or `"` opened and never closed: the rest of the text was
    /// swallowed by the quote.
    #[error("unterminated {quote} quote starting at line {line}, column {column}")]
    UnterminatedQuote {
        /// The quote character that was left open.
        quote: char,
        /// Where it opened: 1-based line of the text given.
        line: usize,
        /// Where it opened: 1-based column (in characters).
        column: usize,
    },
    /// A `$` not followed by a variable name nginx would accept (an empty
    /// name, an unclosed `${`).
    #[error("bad variable `{text}` at line {line}, column {column}: {why}")]
    BadVariable {
        /// The text from the `$` on, as written.
        text: String,
        /// 1-based line of the `$`.
        line: usize,
        /// 1-based column of the `$` (in characters).
        column: usize,
        /// What is wrong with it, in words.
        why: &'static str,
    },
    /// An `escape=` parameter other than `default`, `json` or `none`.
    #[error(
        "unknown `escape={value}` at line {line}, column {column} (expected default, json or none)"
    )]
    BadEscape {
        /// The value after `escape=`, as written.
        value: String,
        /// 1-based line of the `escape=` parameter.
        line: usize,
        /// 1-based column of the `escape=` parameter (in characters).
        column: usize,
    },
    /// A `log_format` directive with a name but no format string after it.
    #[error("log_format `{name}` has no format string")]
    Empty {
        /// The format's name in the directive.
        name: String,
    },
    /// The nginx.conf given has no `log_format` of that name.
    #[error("log_format `{name}` not found in nginx.conf (defined there: {}; built in: {})", if defined.is_empty() { "none".to_string() } else { defined.join(", ") }, builtin_names())]
    NotFound {
        /// The name asked for.
        name: String,
        /// The names the nginx.conf does define, in file order (empty when
        /// it defines none), so the message can suggest one.
        defined: Vec<String>,
    },
    /// A format given by name or body that is neither: no built-in has
    /// the name and, read as a body, it holds no `$variable` (a misspelt
    /// built-in name, most likely).
    #[error(
        "{text:?} is neither a built-in format ({}) nor a format body with $variables",
        builtin_names()
    )]
    NoVariables {
        /// The text given, as written.
        text: String,
    },
}
