//! The few messages of TensorFlow's `event.proto`, `summary.proto`, `tensor.proto` and
//! `tensor_shape.proto` an event file needs, with their field numbers, as prost messages
//! (written by hand: no protoc at build time).

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The step.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What the event holds.
    #[prost(oneof = "What", tags = "3, 5, 7")]
    pub what: Option<What>,
}

/// `Event.what`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// The file's format, first in every file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Values.
    #[prost(message, tag = "5")]
    Summary(Summary),
    /// A run's start: readers drop what an earlier start wrote at or past its step.
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

/// `tensorflow.SessionLog`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionLog {
    /// 1: `START`.
    #[prost(int32, tag = "1")]
    pub status: i32,
    /// The checkpoint the run started from.
    #[prost(string, tag = "2")]
    pub checkpoint_path: String,
    /// A message.
    #[prost(string, tag = "3")]
    pub msg: String,
}

/// `SessionLog.START`.
pub const SESSION_START: i32 = 1;

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// Its values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// `Summary.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    /// The tag (`rollout/reward_mean`).
    #[prost(string, tag = "1")]
    pub tag: String,
    /// Which plugin reads a tensor value.
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    /// The value.
    #[prost(oneof = "Kind", tags = "2, 5, 8")]
    pub kind: Option<Kind>,
}

/// `Summary.Value.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    /// A scalar.
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    /// A histogram.
    #[prost(message, tag = "5")]
    Histo(HistogramProto),
    /// A tensor (text: a string tensor read by the `text` plugin).
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// `tensorflow.HistogramProto`: bucket `i` counts the values in
/// `[bucket_limit[i - 1], bucket_limit[i])`, the first from `min`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramProto {
    /// The least value.
    #[prost(double, tag = "1")]
    pub min: f64,
    /// The greatest.
    #[prost(double, tag = "2")]
    pub max: f64,
    /// How many.
    #[prost(double, tag = "3")]
    pub num: f64,
    /// Their sum.
    #[prost(double, tag = "4")]
    pub sum: f64,
    /// The sum of their squares.
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    /// The buckets' right edges.
    #[prost(double, repeated, tag = "6")]
    pub bucket_limit: Vec<f64>,
    /// Their counts.
    #[prost(double, repeated, tag = "7")]
    pub bucket: Vec<f64>,
}

/// `tensorflow.SummaryMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    /// The plugin.
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// `SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    /// Its name (`text`).
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Its settings (none for text).
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorflow.TensorProto`, strings only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `DT_STRING` (7).
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// The shape (none: a scalar).
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// The strings.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `DataType.DT_STRING`.
pub const DT_STRING: i32 = 7;

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// Its dimensions.
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

/// `TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    /// Its size.
    #[prost(int64, tag = "1")]
    pub size: i64,
}
