"""The probe's batched decoding (decode.py), its numerics verdicts (numerics.py), its budget and memory preflight,
and what it measures (resources.py), on the CPU.

The decoder is compared with transformers' own generate() on the trained tiny-thinker; the CUDA-graph protocol
(warm up, reset the cache, replay the same step on the same tensors) is run on the CPU with the replay being a
plain call, and the decode step is run on the meta device, where any read of a value on the host (which a CUDA
graph cannot capture) raises.
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import ROOT, UPSTREAM

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hfdoctor.probe import decode, numerics, preflight, resources  # noqa: E402
from hfdoctor.probe.session import Generation  # noqa: E402

THINKER = ROOT / "fixtures" / "tiny-thinker"
END_OF_TURN, END_OF_TEXT = 308, 306


@pytest.fixture(scope="module")
def thinker():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(THINKER)
    model = AutoModelForCausalLM.from_pretrained(THINKER).eval()
    return model, tokenizer


def prompts(tokenizer) -> list[list[int]]:
    """Think-on, think-off and a longer question: three prompt lengths, so two rows are left-padded."""
    def render(text, **kwargs):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True, **kwargs)
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]

    return [render("What is 2 plus 3?", enable_thinking=True), render("What is 2 plus 3?", enable_thinking=False),
            render("Please answer with one short sentence, and nothing else: what is 7 plus 8?")]


def decoder(model, how: str, graphs: bool = False) -> decode.Decoder:
    runtime = decode.Runtime(how, graphs)
    return decode.Decoder(model, "cpu", [END_OF_TURN, END_OF_TEXT], END_OF_TEXT, runtime)


@pytest.mark.parametrize("how", ["static", "dynamic"])
def test_batched_rows_stop_at_their_own_end_and_match_generate(thinker, how):
    """Each row of one left-padded batch gets exactly what generate() gives that prompt alone, cut at its
    own eos; the call lasts as long as its longest row."""
    model, tokenizer = thinker
    ids = prompts(tokenizer)
    expected = []
    for row in ids:
        out = model.generate(torch.tensor([row]), max_new_tokens=40, do_sample=False,
                             eos_token_id=[END_OF_TURN, END_OF_TEXT], pad_token_id=END_OF_TEXT)
        expected.append(out[0, len(row):].tolist())
    call = decoder(model, how).run([decode.Row(tuple(r)) for r in ids], budget=40)
    assert [r.ids for r in call.rows] == expected
    assert [len(r.ids) for r in call.rows] == [21, 7, 11]
    assert all(r.stopped_on == END_OF_TURN for r in call.rows)
    assert call.steps == 21 and call.how == how
    assert tokenizer.decode(call.rows[0].ids) == "<think>\n2 plus 3 makes 5.\n</think>\n\nThe answer is 5.<|im_end|>"


def test_the_budget_cuts_a_row_and_says_so(thinker):
    model, tokenizer = thinker
    call = decoder(model, "static").run([decode.Row(tuple(prompts(tokenizer)[0]))], budget=5)
    assert len(call.rows[0].ids) == 5 and call.rows[0].stopped_on is None and call.steps == 5
    assert call.rows[0].trace.top_ids.shape == (5, decode.TRACE_K)


def test_seeded_rows_draw_the_same_numbers_wherever_they_sit(thinker):
    """A sampled row's draws come from its own seed: the same request sampled in two rows of one batch, and
    alone, gives the same tokens; another seed gives other draws."""
    model, tokenizer = thinker
    on = tuple(prompts(tokenizer)[0])
    d = decoder(model, "static")
    batch = d.run([decode.Row(on, 7), decode.Row(tuple(prompts(tokenizer)[2])), decode.Row(on, 7)], budget=30)
    alone = d.run([decode.Row(on, 7)], budget=30)
    assert batch.rows[0].ids == batch.rows[2].ids == alone.rows[0].ids
    assert torch.equal(batch.rows[0].trace.draw, batch.rows[2].trace.draw)
    other = d.run([decode.Row(on, 8)], budget=30)
    assert not torch.equal(other.rows[0].trace.draw, alone.rows[0].trace.draw)
    trace = alone.rows[0].trace
    assert bool(((trace.span[:, 0] <= trace.draw) & (trace.draw <= trace.span[:, 1])).all())
    greedy = d.run([decode.Row(on)], budget=30).rows[0].trace
    assert bool(greedy.draw.isnan().all()) and bool(greedy.span.isnan().all())


def test_the_cuda_graph_protocol_on_the_cpu(thinker, monkeypatch):
    """What a CUDA graph does, with the replay a plain call: the step is run before the prefill (warm-up) and
    then replayed on the very same input tensors; the warm-up's writes to the cache are undone. The tokens are
    those of the decoding without a graph."""
    model, tokenizer = thinker
    rows = [decode.Row(tuple(r)) for r in prompts(tokenizer)]
    plain = decoder(model, "static").run(rows, budget=40)
    captured = []

    class Replay:
        def __init__(self, step_fn):
            self.step_fn = step_fn

        def replay(self):
            self.step_fn()

    def capture_on_cpu(step_fn, cache, step_in):
        decode.warm_up(step_fn, cache)
        assert all(int(layer.cumulative_length) == 0 and not layer.keys.any() for layer in cache.layers)
        captured.append(step_in)
        return Replay(step_fn), None

    monkeypatch.setattr(decode, "capture", capture_on_cpu)
    replayed = decoder(model, "static", graphs=True).run(rows, budget=40)
    assert captured and replayed.how == "static + CUDA graph"
    assert [r.ids for r in replayed.rows] == [r.ids for r in plain.rows]


def test_a_failed_capture_falls_back_to_decoding_without_a_graph(thinker, monkeypatch):
    model, tokenizer = thinker
    monkeypatch.setattr(decode, "capture", lambda *args: (None, "RuntimeError: operation not permitted when "
                                                                 "stream is capturing"))
    d = decoder(model, "static", graphs=True)
    call = d.run([decode.Row(tuple(prompts(tokenizer)[0]))], budget=40)
    assert call.how == "static" and len(call.rows[0].ids) == 21
    assert d.runtime.graphs is False and "capture failed (RuntimeError" in d.runtime.why_not[-1]


def test_the_decode_step_reads_no_value_on_the_host():
    """A CUDA graph replays device work only: a step that reads a tensor's value on the host (.item(), a
    Python `if` on a tensor, nonzero) cannot be captured. On the meta device such a read raises, so the step
    running there, with the static cache and the probe's 4D mask, is one a graph can capture."""
    from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

    config = AutoConfig.from_pretrained(THINKER)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config).eval()
    cache = StaticCache(config=model.config, max_cache_len=64)
    real = torch.ones((3, 10), dtype=torch.bool, device="meta")
    step_in = decode.StepInputs(3, 10, 64, real, torch.device("meta"), model.dtype, "sdpa")
    d = decode.Decoder(model, "meta", [END_OF_TURN], END_OF_TEXT, decode.Runtime("static", True))
    with torch.inference_mode():
        logits = d._step_function(cache, step_in)()
        assert logits.shape == (3, 384)
        with pytest.raises((RuntimeError, NotImplementedError)):
            bool(logits.sum() > 0)  # what the meta device does with a host read


def test_which_models_get_the_static_cache(thinker):
    model, _ = thinker
    runtime = decode.choose_runtime(model, "cpu")
    assert runtime.how == "static" and runtime.graphs is False and "CUDA graphs need a CUDA device" in runtime.why_not
    assert decode.choose_runtime(model, "cuda:0").graphs is True
    from transformers import AutoModelForCausalLM, Gemma2Config

    config = Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8)
    with torch.device("meta"):
        sliding = AutoModelForCausalLM.from_config(config)
    runtime = decode.choose_runtime(sliding, "cuda:0")
    assert runtime.how == "dynamic" and not runtime.graphs and "not all full attention" in runtime.why_not[0]


# --- numerics: is a divergence the dtype's rounding? ------------------------------------------


def traced(ids: list[int], steps: list[dict], seed: int | None = None) -> Generation:
    """A reply whose trace holds, per step, candidates {token: logit} and (sampled) the draw and the span."""
    k = decode.TRACE_K
    top_ids = torch.zeros((len(steps), k), dtype=torch.long)
    top_logits = torch.full((len(steps), k), -30.0)
    draw = torch.full((len(steps),), float("nan"), dtype=torch.float64)
    span = torch.full((len(steps), 2), float("nan"), dtype=torch.float64)
    for n, step in enumerate(steps):
        ranked = sorted(step["logits"].items(), key=lambda kv: -kv[1])
        for j, (token, logit) in enumerate(ranked):
            top_ids[n, j], top_logits[n, j] = token, logit
        for j in range(len(ranked), k):
            top_ids[n, j] = 100 + j
        if "draw" in step:
            draw[n], span[n] = step["draw"], torch.tensor(step["span"], dtype=torch.float64)
    return Generation("p", 3, ids, "", 0.0, None, seed=seed, trace=decode.Trace(top_ids, top_logits, draw, span))


def name(token: int) -> str:
    return f"t{token}"


def test_greedy_runs_parting_at_a_near_tie_within_bf16_rounding_are_explained():
    """bf16 at logits near 20: one unit of the last place is 0.125. Two candidates 0.0625 apart, picked one way
    in the first run and the other way in the second: the dtype's rounding, not the model."""
    first = traced([5, 1], [{"logits": {5: 3.0}}, {"logits": {1: 20.0625, 2: 20.0, 3: 12.0}}])
    again = traced([5, 2], [{"logits": {5: 3.0}}, {"logits": {2: 20.0625, 1: 20.0, 3: 12.0}}])
    why = numerics.explain("bfloat16", first, again, name)
    assert why.explained and why.index == 1
    assert "within bfloat16 rounding" in why.detail and "t1 (id 1) and t2 (id 2)" in why.detail
    assert "at token 2" in why.detail and "not the model" in why.detail
    # The same margins in float32 are far beyond its rounding (about 1e-5 at 20): that divergence is real.
    real = numerics.explain("float32", first, again, name)
    assert not real.explained and "beyond float32 rounding" in real.detail


def test_greedy_runs_parting_with_a_clear_winner_are_not_explained():
    first = traced([1], [{"logits": {1: 20.0, 2: 15.0}}])
    again = traced([2], [{"logits": {2: 20.0, 1: 15.0}}])
    why = numerics.explain("bfloat16", first, again, name)
    assert not why.explained and "5 apart in logits, beyond bfloat16 rounding" in why.detail
    # the second run's pick was not even among the first run's kept candidates, which spread well apart
    far = traced([9], [{"logits": {9: 20.0}}])
    why = numerics.explain("bfloat16", first, far, name)
    assert not why.explained and "at least" in why.detail
    # no step to compare (one run ended where the other went on): never blamed on the model
    longer = traced([1, 7], [{"logits": {1: 20.0}}, {"logits": {7: 3.0}}])
    assert numerics.explain("bfloat16", first, longer, name).explained


def test_sampled_runs_parting_near_an_edge_of_the_distribution_are_explained():
    """The same seed, the same draw 0.5: in one run it fell just inside the first token's span, in the other
    just outside. The edge moved by 0.002, which bf16 rounding of the logits can do."""
    first = traced([1], [{"logits": {1: 1.0, 2: 1.0}, "draw": 0.5, "span": [0.0, 0.501]}], seed=3)
    again = traced([2], [{"logits": {1: 1.0, 2: 1.0}, "draw": 0.5, "span": [0.499, 1.0]}], seed=3)
    why = numerics.explain("bfloat16", first, again, name)
    assert why.explained and "seeded draw 0.500000" in why.detail and "within bfloat16 rounding" in why.detail
    # far from any edge: the distributions themselves differed
    first = traced([1], [{"logits": {1: 1.0, 2: 1.0}, "draw": 0.5, "span": [0.0, 0.9]}], seed=3)
    again = traced([2], [{"logits": {1: 1.0, 2: 1.0}, "draw": 0.5, "span": [0.1, 1.0]}], seed=3)
    assert not numerics.explain("bfloat16", first, again, name).explained
    # different draws from the same seed can never be numerics
    again = traced([2], [{"logits": {1: 1.0, 2: 1.0}, "draw": 0.7, "span": [0.499, 1.0]}], seed=3)
    why = numerics.explain("bfloat16", first, again, name)
    assert not why.explained and "different random numbers" in why.detail


def test_rounding_grows_with_the_scale_of_the_logits():
    assert numerics.rounding("bfloat16", 0.01) == numerics.rounding("bfloat16", 1.0) == 4 * 2 ** -7
    assert numerics.rounding("bfloat16", 20.0) == 20 * 4 * 2 ** -7
    assert numerics.rounding("float16", 1.0) == 4 * 2 ** -10
    assert numerics.rounding("float32", 1.0) == 4 * 2 ** -23


def test_deterministic_kernels_are_asked_for_and_put_back():
    before = torch.are_deterministic_algorithms_enabled()
    determinism = numerics.Determinism()
    with numerics.deterministic_kernels(determinism):
        assert torch.are_deterministic_algorithms_enabled()
        import warnings

        warnings.warn("kthvalue CUDA does not have a deterministic implementation, but you set ...")
        warnings.warn("Deterministic behavior was enabled ... but this operation is not deterministic because it "
                      "uses CuBLAS and you have not set CUBLAS_WORKSPACE_CONFIG=:4096:8 ...")
    assert torch.are_deterministic_algorithms_enabled() == before
    assert determinism.algorithms and determinism.without_kernel == ["kthvalue CUDA"]
    assert determinism.cublas_workspace is None and "without CUBLAS_WORKSPACE_CONFIG" in determinism.note


@pytest.mark.parametrize("folder, asked, shows", [
    ("openai--gpt-oss-20b", {"reasoning_effort": "low"}, "Reasoning: low"),
    ("ByteDance-Seed--Seed-OSS-36B-Instruct", {"thinking_budget": 512}, "the thinking budget, which is 512"),
    ("Qwen--Qwen3-8B", {}, None),
])
def test_short_reasoning_where_the_template_allows_it(folder, asked, shows):
    """Real templates: gpt-oss reads reasoning_effort, Seed-OSS a thinking budget in tokens; Qwen3 neither."""
    from hfdoctor.chat.render import render
    from hfdoctor.probe import plan

    template = (UPSTREAM / folder / "chat_template.jinja").read_text()
    assert plan.short_reasoning(template) == asked
    if shows:
        messages = [{"role": "user", "content": "What is 2 plus 3?"}]
        assert shows in render(template, messages, add_generation_prompt=True, **asked).text
        assert shows not in render(template, messages, add_generation_prompt=True).text


# --- the budget and the memory it needs ----------------------------------------------------------


def test_the_default_budget():
    assert preflight.default_budget("cuda:0", 16 * 2 ** 30) == (1024, "default on a GPU")
    tiny, why = preflight.default_budget("cpu", 500_000)
    assert tiny == 1024 and why.startswith("default on a CPU for 488.3 KiB of weights")
    assert preflight.default_budget("cpu", 16 * 2 ** 30)[0] == 96  # an 8B on a CPU: 96 tokens already take minutes
    middle = preflight.default_budget("cpu", 540 * 2 ** 20)[0]  # SmolLM2-135M dequantized to float32
    assert 96 < middle < 1024 and middle % 32 == 0


def test_kv_cache_from_a_real_config():
    """Qwen3-8B: 36 layers × 8 KV heads × 128 × 2 × 2 bytes (bfloat16) × (256 + 1024) tokens × 6 requests."""
    config = json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "config.json").read_text())
    kv = preflight.kv_cache(config, 1024)
    assert (kv.layers, kv.kv_heads, kv.head_dim, kv.dtype_bytes, kv.tokens, kv.rows) == (36, 8, 128, 2, 1280, 6)
    assert kv.nbytes == 36 * 8 * 128 * 2 * 2 * 1280 * 6
    assert preflight.kv_cache({"model_type": "x"}, 1024) is None
    moe = json.loads((UPSTREAM / "Qwen--Qwen3-30B-A3B" / "config.json").read_text())
    assert preflight.kv_cache(moe, 96).layers == 48


def test_a_model_that_does_not_fit_the_gpu_is_refused_with_the_figures(monkeypatch):
    """Qwen3-8B's 15.3 GiB of bf16 weights and 1.1 GiB of KV cache for the default budget: they fit a GPU with
    17 GiB free; on one with 16 GiB free the weights alone would fit, with the cache they do not."""
    config = json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "config.json").read_text())
    weights, kv = preflight.Weights(["model.safetensors"], 16_381_470_720), preflight.kv_cache(config, 1024)

    def gpus(*free_gib):
        monkeypatch.setattr(preflight, "gpus_free_bytes", lambda: [int(f * 2 ** 30) for f in free_gib])
        monkeypatch.setattr(preflight, "available_bytes", lambda device: int(free_gib[int(device[-1])] * 2 ** 30))

    gpus(17)
    assert preflight.placement(weights, kv, "cuda:0") is None
    gpus(16)
    with pytest.raises(preflight.ProbeRefused) as refused:
        preflight.placement(weights, kv, "cuda:0")
    assert str(refused.value) == (
        "the weights need 15.3 GiB (from the safetensors headers) and the KV cache for 1024 new tokens 1.1 GiB "
        "(36 layers × 8 KV heads × 128 × 2 × 2 bytes × 1280 tokens × 6 requests): 16.3 GiB in all, but cuda:0 "
        "has 16.0 GiB free: probe on a larger GPU, or on several (or with a smaller --max-new-tokens)")
    gpus(10, 10)  # two GPUs that hold it together: spread over them
    assert preflight.placement(weights, kv, "cuda:0") == "auto"
    gpus(8, 8)
    with pytest.raises(preflight.ProbeRefused, match=r"16\.3 GiB in all, but the 2 GPUs have 16\.0 GiB free "
                                                     r"together \(8\.0 GiB, 8\.0 GiB\)"):
        preflight.placement(weights, kv, "cuda:0")


def test_host_memory_tells_anonymous_from_file_backed_pages(tmp_path):
    """Reading a file through a memory map raises file-backed pages, not anonymous ones."""
    import mmap

    if resources.read_status() is None:
        pytest.skip("no /proc/self/status here")
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\1" * (64 * 2 ** 20))
    with resources.HostMemory(interval=0.01) as host:
        with open(data, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            total = sum(mapped[i] for i in range(0, len(mapped), 4096))
            file_peak = resources.read_status()["RssFile"]
            host.sample()  # the periodic readings may miss a short spike; the probe also reads at each stage
    assert total == 64 * 2 ** 20 // 4096
    figures = host.to_json()
    assert figures["peak_host_file_bytes"] >= file_peak >= 64 * 2 ** 20
    assert 0 < figures["peak_host_anon_bytes"] < figures["peak_host_rss_bytes"]
    assert math.isclose(resources.SAMPLE_SECONDS, 0.05)
