"""The README's "Your own model and data" runs as written: its commands, in a fresh folder, save the shipped tiny
models as ordinary checkpoints and explain a text classifier, a causal LM and a ViT through ``model=hf`` (and the
classifier on a CSV in the IMDB format); the first prints the numbers the README quotes."""
import re
import shlex
import subprocess
import sys

from runner.harness import REPO, cli_command, cli_env

SECTION = "### Your own model and data"


def readme_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_readme_section_runs_as_written(tmp_path):
    commands = readme_commands()
    assert [c[0] for c in commands] == ["python"] + ["palrp-bench"] * 4
    models = {c[c.index("model=hf") + 1] for c in commands[1:]}
    assert models == {"model.source=my_models/sentiment_classifier", "model.source=my_models/tiny_lm",
                      "model.source=my_models/shapes_vit"}  # a text classifier, a causal LM and a ViT
    outputs = []
    for command in commands:
        if command[0] == "python":
            argv = [sys.executable, str(REPO / command[1]), *command[2:]]
        else:
            argv = cli_command(*command[1:])
        done = subprocess.run(argv, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        outputs.append(done.stdout)
    assert sorted(p.name for p in (tmp_path / "my_models").iterdir()) == [
        "reviews.csv", "sentiment_classifier", "shapes_vit", "tiny_lm"]
    quoted = re.search(r"`pa_lrp`, AUAC generation (\d\.\d+ \[\d\.\d+, \d\.\d+\])", (REPO / "README.md").read_text())
    assert "sentiment_classifier / synthetic_sentiment" in outputs[1] and quoted.group(1) in outputs[1]
    for out, title in zip(outputs[2:], ("tiny_lm / synthetic_mcqa", "shapes_vit / synthetic_shapes",
                                        "sentiment_classifier / imdb")):
        assert title in out and re.search(r"\| pa_lrp\s+\| \d+", out), out
