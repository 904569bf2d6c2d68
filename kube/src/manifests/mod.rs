//! The one reader of manifest files and cluster snapshots (`kubectl get -o yaml` or `-o json` output, files
//! written by hand): the webhook's standalone mode (`--vpa-dir`), `tailor plan` and `tailor patch` read
//! through it, with the same rules.
//!
//! - A file is a YAML stream (documents separated by `---`), JSON (one value, several values one after the
//!   other, or a YAML stream whose documents are written as JSON), told apart by its first content.
//! - A document is an object, a List (`kind` ending in `List`, with `items`), or a JSON array of either;
//!   empty documents are skipped.
//! - The file is streamed: each object (each item of a List) is built as a JSON value within a bound
//!   ([`MAX_OBJECT_BYTES`], [`MAX_OBJECT_NODES`]), handed to the caller's [`Keep`], which decodes what it
//!   needs into its own slim types, and dropped before the next is read. Neither the file nor the objects
//!   of a List are ever held, only the slim forms the caller keeps (those of one List are handed over
//!   when the List ends).
//! - A directory is read in name order: its `*.yaml`, `*.yml` and `*.json` files, skipping names that start
//!   with `.` (a mounted ConfigMap's `..data`); its subdirectories too where the caller asks ([`Walk`]: the
//!   webhook's `--vpa-dir` is a tree, a `tailor plan` snapshot directory is flat and its subdirectories are
//!   other snapshots' parts); at most [`MAX_FILES`] files.
//! - Errors name the file and the document (1-based, and the item of a List), with the line and column the
//!   parser gives for syntax errors and the field path for objects that do not decode.

mod bounded;
mod document;
pub mod index_objects;
mod markers;

use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use document::Document;

/// Most bytes of keys and strings in one object (the API server refuses objects far smaller).
pub const MAX_OBJECT_BYTES: usize = bounded::MAX_OBJECT_BYTES;
/// Most values (maps, sequences, scalars) in one object.
pub const MAX_OBJECT_NODES: usize = bounded::MAX_OBJECT_NODES;
/// Most objects in one document (items of a List included).
pub const MAX_OBJECTS_PER_DOCUMENT: usize = document::MAX_OBJECTS_PER_DOCUMENT;
/// Most files read from the paths given.
pub const MAX_FILES: usize = 10_000;
/// Deepest directory nesting followed (symbolic links may loop).
const MAX_DIRECTORY_DEPTH: usize = 16;

/// Why manifests could not be read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file or directory cannot be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// More files than [`MAX_FILES`], or directories nested deeper than the reader follows.
    #[error("{}: {what}", path.display())]
    TooMany {
        /// The directory.
        path: PathBuf,
        /// What there is too much of.
        what: String,
    },
    /// A document is not valid YAML or JSON, or exceeds a bound.
    #[error("{}: document {document}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based number of the document in the file.
        document: usize,
        /// The parser's message, with line and column where it gives them.
        message: String,
    },
    /// An object that the caller reads does not decode.
    #[error("{}: {at}: {message}{}", path.display(), described(kind, name))]
    Object {
        /// The file.
        path: PathBuf,
        /// Where in the file.
        at: Position,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What is wrong (with the field path).
        message: String,
    },
}

/// ` (Kind "name")` after an object's error, for what the object gives of the two.
fn described(kind: &str, name: &str) -> String {
    match (kind, name) {
        ("", "") => String::new(),
        ("", name) => format!(" ({name:?})"),
        (kind, name) => format!(" ({kind} {name:?})"),
    }
}

/// Where an object is in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// 1-based number of the document.
    pub document: usize,
    /// 1-based number of the object among the items of a List (or the elements of a JSON array).
    pub item: Option<usize>,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        match self.item {
            Some(item) => write!(f, ", item {item}"),
            None => Ok(()),
        }
    }
}

/// One object as the reader hands it to a [`Keep`].
#[derive(Debug)]
pub struct Object {
    /// `apiVersion` (empty when missing).
    pub api_version: String,
    /// `kind` (empty when missing).
    pub kind: String,
    /// The whole object.
    pub value: Value,
}

impl Object {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// `metadata.name` (empty when missing).
    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Decodes the object (or the part a slim type reads); the error names the field.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| e.to_string())
    }
}

/// What a caller keeps of each object it reads: its own type (typically an enum of slim forms, with a
/// variant for objects it skips). An error refuses the object and ends the read.
pub trait Keep: Sized {
    /// Keeps what the caller needs of `object`.
    fn keep(object: Object) -> Result<Self, String>;
}

/// Keeps every object whole: for `tailor patch`, whose small files hold the pod and the VPA it prints.
impl Keep for Object {
    fn keep(object: Object) -> Result<Self, String> {
        Ok(object)
    }
}

/// Whether a directory's subdirectories are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// The files directly in the directory.
    Flat,
    /// The files of the whole tree.
    Recursive,
}

/// The manifest files under `paths`: a file as given, a directory's files as the module documentation says.
pub fn manifest_files(paths: &[PathBuf], walk_dirs: Walk) -> Result<Vec<PathBuf>, ManifestError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| ManifestError::Io {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            walk(path, walk_dirs, 0, &mut files)?;
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn walk(
    dir: &Path,
    walk_dirs: Walk,
    depth: usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), ManifestError> {
    let io = |source| ManifestError::Io {
        path: dir.to_owned(),
        source,
    };
    let too_many = |what: String| ManifestError::TooMany {
        path: dir.to_owned(),
        what,
    };
    if depth > MAX_DIRECTORY_DEPTH {
        return Err(too_many(format!(
            "directories nested more than {MAX_DIRECTORY_DEPTH} deep"
        )));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            if walk_dirs == Walk::Recursive {
                walk(&path, walk_dirs, depth + 1, out)?;
            }
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            if out.len() >= MAX_FILES {
                return Err(too_many(format!("more than {MAX_FILES} manifest files")));
            }
            out.push(path);
        }
    }
    Ok(())
}

/// Reads one file, handing what `T` keeps of each object to `each`, in order.
pub fn read_file<T: Keep>(path: &Path, each: impl FnMut(Position, T)) -> Result<(), ManifestError> {
    let open = || std::fs::File::open(path).map(|f| BufReader::with_capacity(1 << 16, f));
    read(path, open, each)
}

/// Reads text already in memory (`name` stands for the file in errors), as [`read_file`] reads a file.
pub fn read_text<T: Keep>(
    name: &str,
    text: &str,
    each: impl FnMut(Position, T),
) -> Result<(), ManifestError> {
    read(Path::new(name), || Ok(text.as_bytes()), each)
}

fn read<T: Keep, R: BufRead>(
    path: &Path,
    open: impl Fn() -> io::Result<R>,
    mut each: impl FnMut(Position, T),
) -> Result<(), ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_owned(),
        source,
    };
    let mut reader = open().map_err(io)?;
    if !markers::looks_like_json(reader.fill_buf().map_err(io)?) {
        return read_yaml(path, reader, &mut each);
    }
    let mut delivered = false;
    let json = read_json(path, reader, &mut |at, kept| {
        delivered = true;
        each(at, kept)
    });
    match json {
        // Starts like JSON but is YAML (`{a: 1}` is a YAML flow mapping): read as YAML; if that fails too,
        // the JSON parser's message is the one that fits what the file looks like.
        Err(json_error @ ManifestError::Parse { .. }) if !delivered => {
            read_yaml(path, open().map_err(io)?, &mut each).map_err(|_| json_error)
        }
        other => other,
    }
}

fn parse_error(path: &Path, document: usize, format: &str, message: String) -> ManifestError {
    let bound =
        message.contains(bounded::OVER_BUDGET) || message.contains("objects in one document");
    ManifestError::Parse {
        path: path.to_owned(),
        document,
        message: if bound {
            message
        } else {
            format!("invalid {format}: {message}")
        },
    }
}

fn read_json<T: Keep, R: BufRead>(
    path: &Path,
    reader: R,
    each: &mut impl FnMut(Position, T),
) -> Result<(), ManifestError> {
    let stream = markers::JsonStream::new(reader).map_err(|source| ManifestError::Io {
        path: path.to_owned(),
        source,
    })?;
    let documents =
        serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, stream))
            .into_iter::<Document<T>>();
    for (i, document) in documents.enumerate() {
        let document_number = i + 1;
        let document =
            document.map_err(|e| parse_error(path, document_number, "JSON", e.to_string()))?;
        deliver(path, document_number, document, each)?;
    }
    Ok(())
}

/// The YAML parser's limits: a List is one document, so the per-document counts are lifted; every object
/// is bounded by [`MAX_OBJECT_BYTES`] instead. The limits on aliases stay.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = None;
    budget.max_documents = usize::MAX;
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_total_scalar_bytes = usize::MAX;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

fn read_yaml<T: Keep, R: BufRead>(
    path: &Path,
    mut reader: R,
    each: &mut impl FnMut(Position, T),
) -> Result<(), ManifestError> {
    let documents = serde_saphyr::read_with_options::<_, Document<T>>(&mut reader, yaml_options());
    for (i, document) in documents.enumerate() {
        let document_number = i + 1;
        let document =
            document.map_err(|e| parse_error(path, document_number, "YAML", e.to_string()))?;
        deliver(path, document_number, document, each)?;
    }
    Ok(())
}

fn deliver<T>(
    path: &Path,
    document: usize,
    read: Document<T>,
    each: &mut impl FnMut(Position, T),
) -> Result<(), ManifestError> {
    for (i, object) in read.objects.into_iter().enumerate() {
        let at = Position {
            document,
            item: read.items.then_some(i + 1),
        };
        match object {
            Ok(kept) => each(at, kept),
            Err(refused) => {
                return Err(ManifestError::Object {
                    path: path.to_owned(),
                    at,
                    kind: refused.kind,
                    name: refused.name,
                    message: refused.message,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
