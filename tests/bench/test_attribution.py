"""palrp_bench/bench/attribution.py (``scripts/bench_attribution.py``) measures the encoder-decoder T5 family through
the same ``explain`` path as the decoders (docs/engine.md, "T5"): a tiny run writes one row per method with its ratio
to Gradient x Input."""
import json

from palrp_bench.bench import attribution as bench


def test_the_t5_family_runs_with_encoder_and_decoder_tokens(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(["--family", "t5", "--preset", "tiny", "--lengths", "12", "--decoder-length", "3", "--repeats", "1",
                "--warmup", "0", "--no-memory", "--threads", "1", "--device", "cpu", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == list(bench.METHODS)
    assert all(r["family"] == "t5" and r["length"] == 12 and r["ms"] > 0 for r in rows)
    assert rows[0]["ratio"] == 1.0
    cfg = bench.family_config("t5", "flan_t5_small", 512)
    assert (cfg.d_model, cfg.d_kv, cfg.num_heads, cfg.num_layers, cfg.d_ff) == (512, 64, 6, 8, 1024)
    assert cfg.is_gated_act and not cfg.scale_decoder_outputs
