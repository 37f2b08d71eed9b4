"""Text output a person reads: lines of about 160 characters, each sentence once, unknown says why,
several targets in the order given (issue 42, "Output is still long"), on real upstream metadata."""

from __future__ import annotations

import json
import shutil

from conftest import ROOT, UPSTREAM, read_json, run_cli, write_json

from hfdoctor.report.text import LINE_CHARS, first_clause, shorten

QWEN3 = "Qwen--Qwen3-8B"


def test_shorten_cuts_at_a_clause_or_a_word_never_mid_word():
    text = ("config.json has rope_theta 1e+06 only inside rope_parameters (as transformers 5 saves it): "
            "transformers 4.x reads the top-level rope_theta")
    assert shorten(text, 200) == text
    assert shorten(text, 80) == "config.json has rope_theta 1e+06 only inside rope_parameters …"
    assert shorten("a " * 100, 21).endswith(" a …") and len(shorten("word " * 50, 40)) <= 40
    assert first_clause("the weights could not be compared (not built: time): more") == \
        "the weights could not be compared (not built: time)"


def test_default_lines_are_short_and_verbose_keeps_whole_messages():
    targets = [QWEN3, "HuggingFaceTB--SmolLM3-3B", "openai--gpt-oss-20b", "google--gemma-2-2b-it"]
    out = run_cli("check", *targets, "--show-info", "--jobs", "1", cwd=UPSTREAM).stdout

    def width(line: str) -> int:
        """A finding's line is about 160 characters plus the target's name, as long as the user wrote it."""
        target = next((t for t in targets if line.startswith(t + "/")), "")
        return len(line) - len(target)

    finding_lines = [line for line in out.splitlines() if line.startswith(tuple(targets)) and ": " in line]
    assert finding_lines and all(width(line) <= LINE_CHARS for line in out.splitlines() if "  lineage: " not in line), \
        [line for line in out.splitlines() if width(line) > LINE_CHARS]
    assert "whole messages: --verbose" in out
    whole = run_cli("check", *targets, "--show-info", "--verbose", "--format", "text", "--jobs", "1",
                    cwd=UPSTREAM).stdout
    reports = json.loads(run_cli("check", *targets, "--format", "json", "--jobs", "1", cwd=UPSTREAM).stdout)
    for report in reports:
        for f in report["findings"]:
            assert f["message"] in whole


def test_each_sentence_is_printed_once(tmp_path):
    """Qwen3-8B saved as transformers 5 saves it (rope_theta only inside rope_parameters): the
    compat lines name CMP001 instead of repeating its sentence for five engines."""
    folder = tmp_path / "qwen3-v5"
    shutil.copytree(UPSTREAM / QWEN3, folder)
    config = read_json(folder / "config.json")
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": config.pop("rope_theta")}
    write_json(folder / "config.json", config)
    for extra in ((), ("--verbose",)):
        out = run_cli("check", folder.name, "--show-info", *extra, cwd=tmp_path).stdout
        assert out.count("rope_theta 1e+06 only inside") == 1, out
        compat = [line for line in out.splitlines() if line.startswith("    ") and "CMP001" in line]
        assert compat and "transformers-4 fails" in compat[0] and compat[0].endswith("CMP001 below"), out


def test_unknown_says_why():
    out = run_cli("check", str(UPSTREAM / QWEN3)).stdout
    assert "compat: every engine (9) unknown" in out
    assert "8 engines unknown: no safetensors weights here to compare with config.json" in out
    assert "transformers.js unknown: no ONNX weights (onnx/*.onnx)" in out
    gemma = run_cli("check", str(UPSTREAM / "google--gemma-2-2b-it")).stdout  # metadata without config.json
    assert "7 engines unknown: no config.json\n" in gemma and "llama.cpp unknown: no config.json and no GGUF" in gemma


def test_several_targets_print_in_the_order_given():
    seed, qwen = str(ROOT / "fixtures" / "seed-incident"), str(UPSTREAM / QWEN3)
    for order in ([seed, qwen], [qwen, seed]):
        out = run_cli("check", *order, "--jobs", "2").stdout
        heads = [line.split("  lineage:")[0] for line in out.splitlines() if "  lineage:" in line]
        assert heads == order
        quiet = run_cli("check", *order, "--jobs", "2", "-q").stdout.splitlines()
        assert [line.split(": ")[0] for line in quiet[:2]] == order
        listed = json.loads(run_cli("check", *order, "--jobs", "2", "--format", "json").stdout)
        assert [r["target"] for r in listed] == order
