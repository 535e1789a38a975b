"""Reads a directory of TensorBoard event files with TensorBoard's own reader (its
EventMultiplexer: every run below the directory, SessionLog START purges included) and prints
what it holds as JSON: per run, the scalars, histograms and text by tag, with their steps."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator, event_multiplexer

KEEP_ALL = {
    event_accumulator.SCALARS: 0,
    event_accumulator.HISTOGRAMS: 0,
    event_accumulator.TENSORS: 0,
}

mux = event_multiplexer.EventMultiplexer(size_guidance=KEEP_ALL)
mux.AddRunsFromDirectory(sys.argv[1])
mux.Reload()
out = {}
for run in sorted(mux.Runs()):
    acc = mux.GetAccumulator(run)
    tags = acc.Tags()
    try:
        text_tags = set(acc.PluginTagToContent("text"))
    except KeyError:
        text_tags = set()
    out[run] = {
        "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
        "histograms": {
            t: [
                [e.step, e.histogram_value.num, e.histogram_value.min, e.histogram_value.max,
                 e.histogram_value.sum]
                for e in acc.Histograms(t)
            ]
            for t in tags["histograms"]
        },
        "texts": {
            t: [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(t)]
            for t in tags["tensors"]
            if t in text_tags
        },
    }
json.dump(out, sys.stdout)
