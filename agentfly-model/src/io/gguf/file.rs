//! The GGUF header: magic, version, metadata and the tensor table, read as a stream and
//! checked against the file's size, so a corrupt count or dimension is an error that names
//! the file and the field, never an allocation of what it claims.

use super::quant::GgmlType;
use crate::error::ModelError;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Any integer type.
    Int(i64),
    /// f32 or f64.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<MetaValue>),
}

/// A tensor's entry in the table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// llama.cpp's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// ggml order: `dims[0]` varies fastest.
    pub dims: Vec<usize>,
    /// The element type.
    pub kind: GgmlType,
    /// Bytes from the start of the data section.
    pub offset: u64,
    /// Bytes of its data.
    pub size: u64,
}

impl TensorInfo {
    /// Elements.
    pub fn count(&self) -> usize {
        self.dims.iter().product()
    }

    /// The shape in row-major (Hugging Face) order: the reverse of ggml's.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
}

/// An open GGUF file: its metadata and its tensor table; tensors are read on demand.
#[derive(Debug)]
pub struct GgufFile {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// Metadata by key.
    pub metadata: HashMap<String, MetaValue>,
    /// The tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
    pub(super) data_start: u64,
    /// Each metadata entry's key and its bytes' range in the file (key, type and value),
    /// in file order: a written copy keeps the values' exact types.
    pub(super) entries: Vec<(String, std::ops::Range<u64>)>,
}

/// The most dimensions a ggml tensor has.
const MAX_DIMS: usize = 4;

/// Reads the header, knowing how many bytes the file has left.
struct Reader<'a> {
    inner: BufReader<&'a File>,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl Reader<'_> {
    fn corrupt(&self, what: impl std::fmt::Display) -> ModelError {
        ModelError::format(
            self.path,
            format!("corrupt GGUF header at byte {}: {what}", self.pos),
        )
    }

    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, ModelError> {
        if n > self.len - self.pos {
            return Err(ModelError::format(
                self.path,
                format!(
                    "truncated GGUF header: needs {n} bytes at offset {}, the file has {} left",
                    self.pos,
                    self.len - self.pos
                ),
            ));
        }
        let mut buf = vec![0; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(ModelError::io(self.path))?;
        self.pos += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ModelError> {
        Ok(self.bytes(N as u64)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items of at least `min_bytes` each, which the rest of the file must hold.
    fn count(&mut self, what: &str, min_bytes: u64) -> Result<usize, ModelError> {
        let n = self.u64()?;
        if n.saturating_mul(min_bytes) > self.len - self.pos {
            return Err(self.corrupt(format!(
                "{what} is {n}, more than the {} bytes left can hold",
                self.len - self.pos
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String, ModelError> {
        let len = self.count("a string's length", 1)?;
        Ok(String::from_utf8_lossy(&self.bytes(len as u64)?).into_owned())
    }

    fn value(&mut self, kind: u32, depth: usize) -> Result<MetaValue, ModelError> {
        Ok(match kind {
            0 => MetaValue::Int(self.array::<1>()?[0] as i64),
            1 => MetaValue::Int(self.array::<1>()?[0] as i8 as i64),
            2 => MetaValue::Int(u16::from_le_bytes(self.array()?) as i64),
            3 => MetaValue::Int(i16::from_le_bytes(self.array()?) as i64),
            4 => MetaValue::Int(self.u32()? as i64),
            5 => MetaValue::Int(self.u32()? as i32 as i64),
            6 => MetaValue::Float(f32::from_le_bytes(self.array()?) as f64),
            7 => MetaValue::Bool(self.array::<1>()?[0] != 0),
            8 => MetaValue::Str(self.string()?),
            9 if depth < 4 => {
                let item = self.u32()?;
                let count = self.count("an array's length", 1)?;
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(item, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::Int(self.u64()? as i64),
            11 => MetaValue::Int(self.u64()? as i64),
            12 => MetaValue::Float(f64::from_le_bytes(self.array()?)),
            other => return Err(self.corrupt(format!("unknown metadata value type {other}"))),
        })
    }
}

impl GgufFile {
    /// Opens `path` and reads its header (not its tensors).
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let file = File::open(path).map_err(ModelError::io(path))?;
        let len = file.metadata().map_err(ModelError::io(path))?.len();
        let mut r = Reader {
            inner: BufReader::with_capacity(1 << 20, &file),
            pos: 0,
            len,
            path,
        };
        if len < 4 || r.bytes(4)? != b"GGUF" {
            return Err(ModelError::format(path, "not a GGUF file (no GGUF magic)"));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::format(
                path,
                format!("GGUF version {version} is not supported (2 and 3 are)"),
            ));
        }
        // A tensor entry takes at least 32 bytes, a metadata entry at least 13.
        let tensor_count = r.count("the tensor count", 32)?;
        let kv_count = r.count("the metadata count", 13)?;
        let mut metadata = HashMap::with_capacity(kv_count);
        let mut entries = Vec::with_capacity(kv_count);
        for _ in 0..kv_count {
            let start = r.pos;
            let key = r.string()?;
            let kind = r.u32()?;
            let value = r.value(kind, 0)?;
            entries.push((key.clone(), start..r.pos));
            metadata.insert(key, value);
        }
        let mut tensors = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = r.string()?;
            let n_dims = r.u32()? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(r.corrupt(format!(
                    "tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS})"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(r.u64()?);
            }
            let id = r.u32()?;
            let offset = r.u64()?;
            let kind = GgmlType::from_id(id).ok_or_else(|| {
                ModelError::format(
                    path,
                    format!(
                        "tensor `{name}`: ggml type {id} is not supported ({})",
                        GgmlType::SUPPORTED
                    ),
                )
            })?;
            // Each dimension, and so the element count, is bounded by the file's size.
            let count = dims
                .iter()
                .try_fold(1u64, |n, &d| {
                    n.checked_mul(d).filter(|&n| n <= len.saturating_mul(8))
                })
                .ok_or_else(|| {
                    r.corrupt(format!(
                        "tensor `{name}` has dimensions {dims:?}, more elements than the file holds"
                    ))
                })?;
            let size = kind.byte_size(count).ok_or_else(|| {
                ModelError::format(
                    path,
                    format!(
                        "tensor `{name}`: {count} elements are not a whole number of {} blocks of {}",
                        kind.name(),
                        kind.block_len()
                    ),
                )
            })?;
            tensors.push(TensorInfo {
                name,
                dims: dims.iter().map(|&d| d as usize).collect(),
                kind,
                offset,
                size,
            });
        }
        let data_start = align_up(r.pos, alignment(&metadata));
        for t in &tensors {
            let end = data_start
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.size));
            if end.is_none_or(|e| e > len) {
                return Err(ModelError::format(
                    path,
                    format!(
                        "tensor `{}` runs past the end of the file (truncated?)",
                        t.name
                    ),
                ));
            }
        }
        drop(r);
        Ok(Self {
            path: path.to_path_buf(),
            file,
            metadata,
            tensors,
            data_start,
            entries,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `len` bytes of the file from byte `start`.
    pub(super) fn bytes_at(&self, start: u64, len: usize) -> Result<Vec<u8>, ModelError> {
        let mut bytes = vec![0u8; len];
        let mut file = &self.file;
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(ModelError::io(&self.path))?;
        Ok(bytes)
    }
}

/// The data section's alignment: `general.alignment`, 32 by default.
pub(super) fn alignment(metadata: &HashMap<String, MetaValue>) -> u64 {
    match metadata.get("general.alignment") {
        Some(MetaValue::Int(a)) if *a > 0 => *a as u64,
        _ => 32,
    }
}

/// `n` rounded up to a multiple of `alignment`.
pub(super) fn align_up(n: u64, alignment: u64) -> u64 {
    n.div_ceil(alignment) * alignment
}
