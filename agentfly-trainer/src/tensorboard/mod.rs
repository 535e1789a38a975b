//! TensorBoard event files: scalars, histograms and text, written as TensorFlow's TFRecord
//! framing of `Event` messages (prost), which TensorBoard, `tensorboard.backend`'s readers,
//! TensorFlow's `summary_iterator` and W&B's `wandb sync --sync-tensorboard` read.
//!
//! Each record is written whole with one `write` as soon as it is made, so a run is
//! watchable while it trains and a killed run leaves at most its last record cut short
//! (which the readers skip). A resumed run opens a new file and starts it with a
//! `SessionLog START` at its step: TensorBoard then drops what the earlier run wrote past it.

mod proto;

use prost::Message as _;
use proto::{
    DT_STRING, Event, HistogramProto, Kind, PluginData, SESSION_START, SessionLog, Summary,
    SummaryMetadata, TensorProto, Value, What,
};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many buckets a histogram has (TensorBoard shows them re-binned).
const BUCKETS: usize = 30;

/// One event file, appended to.
#[derive(Debug)]
pub struct EventWriter {
    file: std::fs::File,
    path: PathBuf,
}

/// A file name no other writer of this process (or another) takes: TensorBoard reads every
/// file with `tfevents` in its name, in name order.
fn file_name() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "events.out.tfevents.{secs:010}.agentfly.{}.{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// TFRecord's masked CRC-32C.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` framed as one TFRecord: length, its checksum, the data, its checksum.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// A histogram of the finite `values`: equal-width buckets from the least to the greatest
/// (one when they are all equal); `None` when there is none.
fn histogram(values: &[f64]) -> Option<HistogramProto> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let min = finite.iter().copied().reduce(f64::min)?;
    let max = finite.iter().copied().reduce(f64::max)?;
    let buckets = if max > min { BUCKETS } else { 1 };
    let width = (max - min) / buckets as f64;
    let mut bucket = vec![0.0; buckets];
    for v in &finite {
        let i = (((v - min) / width) as usize).min(buckets - 1);
        bucket[if width > 0.0 { i } else { 0 }] += 1.0;
    }
    // The last edge is open, as TensorFlow writes it; the readers show `max` there.
    let bucket_limit = (1..=buckets)
        .map(|i| {
            if i == buckets {
                f64::MAX
            } else {
                min + width * i as f64
            }
        })
        .collect();
    Some(HistogramProto {
        min,
        max,
        num: finite.len() as f64,
        sum: finite.iter().sum(),
        sum_squares: finite.iter().map(|v| v * v).sum(),
        bucket_limit,
        bucket,
    })
}

/// A run's event files, one per directory (TensorBoard's runs), each opened on first use.
#[derive(Debug, Default)]
pub struct EventFiles {
    files: std::collections::BTreeMap<PathBuf, EventWriter>,
}

impl EventFiles {
    /// Runs `f` on the file in `dir`; a new file starts with a restart marker at `start`
    /// (the first step it will hold: readers drop what earlier files hold from there on).
    pub fn with(
        &mut self,
        dir: &Path,
        start: u64,
        f: impl FnOnce(&mut EventWriter) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let writer = match self.files.entry(dir.to_path_buf()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let mut writer = EventWriter::create(dir)?;
                writer.start_at(start)?;
                e.insert(writer)
            }
        };
        f(writer)
    }
}

impl EventWriter {
    /// A new event file in `dir` (made when missing), begun with the format's version.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(file_name());
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        let mut writer = Self { file, path };
        writer.write(0, What::FileVersion("brain.Event:2".into()))?;
        Ok(writer)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, step: u64, what: What) -> std::io::Result<()> {
        let event = Event {
            wall_time: now(),
            step: step as i64,
            what: Some(what),
        };
        self.file.write_all(&record(&event.encode_to_vec()))
    }

    fn values(&mut self, step: u64, value: Vec<Value>) -> std::io::Result<()> {
        if value.is_empty() {
            return Ok(());
        }
        self.write(step, What::Summary(Summary { value }))
    }

    /// Marks a (re)start at `step`: readers drop the events an earlier run wrote from
    /// `step` on.
    pub fn start_at(&mut self, step: u64) -> std::io::Result<()> {
        self.write(
            step,
            What::SessionLog(SessionLog {
                status: SESSION_START,
                checkpoint_path: String::new(),
                msg: format!("resumed at step {step}"),
            }),
        )
    }

    /// Scalars of `step`, in one event; the non-finite ones are left out.
    pub fn scalars<S: AsRef<str>>(
        &mut self,
        step: u64,
        scalars: &[(S, f64)],
    ) -> std::io::Result<()> {
        let value = scalars
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(tag, v)| Value {
                tag: tag.as_ref().into(),
                metadata: None,
                kind: Some(Kind::SimpleValue(*v as f32)),
            })
            .collect();
        self.values(step, value)
    }

    /// The distribution of `values` at `step` (nothing when none is finite).
    pub fn histogram(&mut self, tag: &str, step: u64, values: &[f64]) -> std::io::Result<()> {
        let Some(histo) = histogram(values) else {
            return Ok(());
        };
        let value = Value {
            tag: tag.into(),
            metadata: None,
            kind: Some(Kind::Histo(histo)),
        };
        self.values(step, vec![value])
    }

    /// Text at `step`, shown as Markdown by TensorBoard's text dashboard.
    pub fn text(&mut self, tag: &str, step: u64, markdown: &str) -> std::io::Result<()> {
        let value = Value {
            tag: tag.into(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: "text".into(),
                    content: Vec::new(),
                }),
            }),
            kind: Some(Kind::Tensor(TensorProto {
                dtype: DT_STRING,
                tensor_shape: Some(proto::TensorShapeProto { dim: Vec::new() }),
                string_val: vec![markdown.as_bytes().to_vec()],
            })),
        };
        self.values(step, vec![value])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a file's records back, checking each checksum.
    fn records(bytes: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc(len_bytes));
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(data));
            out.push(Event::decode(data).unwrap());
            at += 16 + len;
        }
        out
    }

    #[test]
    fn the_masked_checksum_is_tensorflows() {
        // TensorFlow's `crc32c::Mask` of crc32c("") = 0 and of crc32c("a") = 0xc1d04330.
        assert_eq!(masked_crc(b""), 0xa282_ead8);
        assert_eq!(masked_crc(b"a"), 0x28e4_6e78);
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn records_read_back_with_their_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalars(3, &[("a/x", 0.5), ("a/nan", f64::NAN)]).unwrap();
        w.histogram("h", 3, &[0.0, 1.0, 1.0, 3.0, f64::INFINITY])
            .unwrap();
        w.histogram("empty", 3, &[]).unwrap();
        w.text("t", 4, "**hi**").unwrap();
        w.start_at(2).unwrap();
        let events = records(&std::fs::read(w.path()).unwrap());
        assert_eq!(events.len(), 5);
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        let Some(What::Summary(s)) = &events[1].what else {
            panic!("{:?}", events[1]);
        };
        assert_eq!(s.value.len(), 1, "the NaN is left out");
        assert_eq!(s.value[0].kind, Some(Kind::SimpleValue(0.5)));
        assert_eq!(events[1].step, 3);
        let Some(What::Summary(s)) = &events[2].what else {
            panic!()
        };
        let Some(Kind::Histo(h)) = &s.value[0].kind else {
            panic!()
        };
        assert_eq!((h.min, h.max, h.num, h.sum), (0.0, 3.0, 4.0, 5.0));
        assert_eq!(h.bucket.iter().sum::<f64>(), 4.0);
        assert_eq!((h.bucket[0], h.bucket[10], h.bucket[29]), (1.0, 2.0, 1.0));
        assert_eq!(h.bucket_limit.len(), 30);
        let Some(What::Summary(s)) = &events[3].what else {
            panic!()
        };
        let Some(Kind::Tensor(t)) = &s.value[0].kind else {
            panic!()
        };
        assert_eq!(t.string_val, vec![b"**hi**".to_vec()]);
        assert!(matches!(
            &events[4].what,
            Some(What::SessionLog(SessionLog { status: 1, .. }))
        ));
        assert_eq!(events[4].step, 2);
    }

    #[test]
    fn equal_values_make_one_bucket() {
        let h = histogram(&[2.0, 2.0]).unwrap();
        assert_eq!((h.bucket.clone(), h.min, h.max), (vec![2.0], 2.0, 2.0));
        assert!(histogram(&[f64::NAN]).is_none());
    }
}
