"""palrp_bench.inseq: PA-LRP registered as an inseq attribution method attributes a tiny causal LM step by step, and
each step's scores are ``explain``'s for that prefix and generated token (docs/captum.md, "inseq")."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.errors import BadInputError

inseq = pytest.importorskip("inseq", reason="inseq is not installed (pip install -e '.[dev]' brings it)")


@pytest.fixture(scope="module")
def tiny_lm():
    import transformers

    from palrp_bench.data import synthetic_text

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(synthetic_text.tiny_text_config("causal")).eval()
    return model, synthetic_text.build_tiny_tokenizer()


def test_pa_lrp_through_inseq_is_explain_per_generated_token(tiny_lm):
    from palrp_bench.inseq import register_inseq_methods

    model, tokenizer = tiny_lm
    classes = register_inseq_methods()
    assert set(classes) == {"pa_lrp", "attnlrp", "pe_only", "pa_lrp_no_multisink", "cp_lrp", "grad_x_input"}
    assert "pa_lrp" in inseq.list_feature_attribution_methods()
    assert register_inseq_methods(["pa_lrp"])["pa_lrp"] is classes["pa_lrp"]  # registering twice changes nothing
    wrapped = inseq.load_model(model, "pa_lrp", tokenizer=tokenizer)
    out = wrapped.attribute("the film was brilliant", generation_args={"max_new_tokens": 2, "do_sample": False},
                            skip_special_tokens=True, show_progress=False)
    seq = out.sequence_attributions[0]
    ids = [t.id for t in seq.target]
    n_prompt = len(tokenizer("the film was brilliant", add_special_tokens=False)["input_ids"])
    assert len(ids) == n_prompt + 2
    scores = seq.target_attributions  # [prefix position, generation step]
    for step in range(2):
        prefix = torch.tensor([ids[:n_prompt + step]])
        expected = explain(model, prefix, method="pa_lrp", target=ids[n_prompt + step]).scores[0]
        torch.testing.assert_close(scores[:n_prompt + step, step].float(), expected.float(), rtol=1e-6, atol=1e-7)
        assert torch.isnan(scores[n_prompt + step:, step]).all()  # inseq: no score for the positions after


def test_only_language_model_methods_register():
    from palrp_bench.inseq import register_inseq_methods

    with pytest.raises(BadInputError, match="no palrp-bench method for language models"):
        register_inseq_methods(["attnlrp_gamma_b4"])
