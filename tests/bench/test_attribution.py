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


def test_the_mixtral_family_runs_beside_plain_autograd_on_the_library_model(tmp_path):
    """The mixture-of-experts bench (docs/engine.md, "Mixture of experts"): the twin's methods and plain autograd
    through the unmodified library model, whose Gradient x Input is the twin's (same values, the floor's cost)."""
    out = tmp_path / "bench.json"
    methods = ["grad_x_input", "pa_lrp", bench.LIBRARY]
    bench.main(["--family", "mixtral", "--preset", "tiny", "--lengths", "10", "--repeats", "1", "--warmup", "0",
                "--no-memory", "--threads", "1", "--device", "cpu", "--json", str(out), "--methods", *methods])
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == methods and all(r["ms"] > 0 for r in rows)

    class Args:
        family, preset, lengths, device, dtype, batch, decoder_length = "mixtral", "tiny", [10], "cpu", "float32", 2, 1

    model, ids = bench.build(Args, 10)
    assert model.config.num_local_experts == 8 and model.config.num_experts_per_tok == 2
    ours = bench.attribute(model, ids, "grad_x_input").semantic
    assert (ours - bench.attribute(model, ids, bench.LIBRARY)).abs().max() < 1e-4 * ours.abs().max()
