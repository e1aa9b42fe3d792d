#!/usr/bin/env python
"""Reference outputs of the OFFICIAL PA-LRP code (commit 51eb418) for the vision perturbation protocol (Table 4).

Purpose: give palrp-bench's tests data that only the official code produced (docs/protocol.md section 3), on the
tiny official-code ViT of ``tests/data/official/vision`` (``deit_d2.pth``, ``images_raw.pt``):

Four samples: fixture images 0 and 1, each once with the predicted class as target (target curve starts at 1)
and once with the runner-up class (target curve can rise as pixels go). Files (same keys in all four; the README
in that folder lists them):

* ``official_pert_ties.npz``: tie-heavy maps (ReLU of seeded random 14x14 patch scores, so that about half of
  the pixels are exactly 0 after the upsampling) and, per sample and per step, the exact set of pixels the
  official ``torch.topk`` call removed, for positive and negative perturbation and for the predicted- and
  target-class maps: a test can check that ``tie_break=topk`` removes exactly these pixels (same torch build
  and device).
* ``official_pert_{attnlrp,pa_lrp,pe_only}.npz``: the official explanation maps of the three vision rows for
  the predicted and the target class, and the official per-sample curves (target curves not all zero).

Nothing here comes from palrp_bench: the maps, the normalisation, the pixel selection and the curves are
computed by the official functions themselves, imported from ``--official-src`` (a checkout or ``git archive``
of github.com/YardenBakish/PE-AWARE-LRP at commit 51eb418, kept OUTSIDE this repository; its files are
checked against their git blob ids before anything runs). The official code has no licence, so it is never
copied here.

Run it ONLY with the separate virtualenv pinned in ``scripts/official_fixtures_requirements.txt`` (the official
code needs zennit, einops, h5py, opencv and matplotlib, which palrp_bench does not), from the repository root::

    python3 -m venv ../official-venv
    ../official-venv/bin/pip install -r scripts/official_fixtures_requirements.txt
    ../official-venv/bin/python scripts/make_official_fixtures.py --official-src <official checkout> \\
        --out tests/data/official/vision

Official code path, exactly as ``evaluate_perturbations.py --both`` chains it (maps computed once, then one
perturbation run per sign):

1. ``generate_visualizations.compute_saliency_and_save(args)``: explains every sample twice (predicted class,
   then target class), upsamples 14x14 maps bilinearly (``F.interpolate(scale_factor=16)``; pixel-level
   ``full_lrp`` maps are used as they are), min-max normalises each map and writes ``results.hdf5``.
2. ``generate_perturbations.eval(args)`` with ``args.neg`` = 0 and 1 on ``dataset.expl_hdf5.ImagenetResults``
   (batch size 1, as the official default): per step ``torch.topk`` on the flattened (negated for ``neg``)
   map, black pixels, predicted ("top") and target curves.

Runtime shims, applied in this process only while the official functions run (the official files on disk are
never modified):

* ``torch.Tensor.cuda`` returns the tensor itself: the official code moves some tensors to the GPU
  unconditionally (``ViT_explanation_generator.LRP.generate_LRP``, ``compute_saliency_and_save``); here
  everything runs on the CPU.
* A stub module ``old.model_ablation``: ``generate_visualizations`` imports it at the top but uses it only in
  its ``__main__`` block, and the directory ``old/`` is not part of commit 51eb418.
* The module globals that the official ``__main__`` blocks would set (``lrp``, ``sample_loader``, ``device``,
  ``model``, ``imagenet_ds``, ``exp_name``) are set by this script; the loaders are ``DataLoader(batch_size=1,
  shuffle=False, num_workers=0)`` (official: ``num_workers=1`` with a spawned worker, same order and data).
* The model is the official ``models.model.VisionTransformer`` built with the fixture's sizes (depth 2, dim 64,
  2 heads, 10 classes) and the components ``config.set_components_custom_lrp`` selects (``model_env`` only
  builds the full-size DeiTs); the checkpoint is loaded like the official scripts (``strict=False``), and this
  script checks that the only keys missing are the ``attn.v_proj`` ones, whose weights are views of the loaded
  ``qkv`` weights in the official ``Attention``.
* Tie-heavy maps only: the ``lrp`` object given to ``compute_saliency_and_save`` is a stand-in whose
  ``generate_LRP`` returns the seeded 14x14 patch scores (method ``custom_lrp``, the official branch that
  upsamples 14x14 maps), so the official upsampling, normalisation and storage apply to them.

Instrumentation (records, does not change anything): ``torch.topk`` is wrapped to record the indices each call
returns, and ``generate_perturbations.calc_auc`` to record the per-sample 0/1 and logit/probability arrays it is
given (the official code keeps them only as local variables and prints their means).

``torch.topk`` breaks ties in an order that depends on the torch build and device: the removed-pixel sets are
valid for the torch version and device recorded in each file's ``meta_json``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import platform
import sys
import tempfile
import time
import types
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

OFFICIAL_COMMIT = "51eb418efd2ec4ee7c203f44e9d777f1f3ac164d"
#: git blob ids of every official file this script imports, at OFFICIAL_COMMIT (``git ls-tree 51eb418 <path>``).
OFFICIAL_BLOBS = {
    "ViT_explanation_generator.py": "b72d5a7a88598e364184b8a2f8cebf18a5929e12",
    "baselines/ViT/layer_helpers.py": "c7d3208dd002cbd75da7a8992f2b889a891c6fa1",
    "baselines/ViT/misc_functions.py": "1971eb1b4043af4ef220315891de83d2d30263d3",
    "baselines/ViT/weight_init.py": "616373c3c1d0e9dc9cac51f85d791346e2240c99",
    "config.py": "72613f84f39ee6a585aea13ff0bada6a50830ee1",
    "dataset/expl_hdf5.py": "c099c0c77d14d15bff71ff3c34d62a49b50e8f01",
    "deit/datasets.py": "dbc893e5350c041030f27025f98deea00d5a5193",
    "generate_perturbations.py": "f49f5a6c35dc98470a0f47dfa18bc3c4e6646f63",
    "generate_visualizations.py": "6013c3c6ff0edb5824464d11cc745ff673561ab9",
    "misc/helper_functions.py": "801e677391f3b718225176e9020a7ec6632175fe",
    "models/model.py": "3e425ef4f74d45a3a2fbb10b12909dc9f30d1f36",
    "models/model_handler.py": "da0e855fb7830d4fb68a48b35fd4c40a36dddccb",
    "models/model_train.py": "8120c72e314283134c268c1c72215ef4aab2496f",
    "modules/layers_ours.py": "a61cac492f74a4d63913664d66ed36bf029f3778",
    "modules/layers_patch_embed.py": "5130428193d6da7381dfd882b55cfc6444505c74",
}
#: palrp-bench row -> official ``--method`` (the names analyze_pert_results.py runs; docs/protocol.md section 1).
METHODS = {
    "attnlrp": "full_lrp_GammaLinear_gammaConv",
    "pa_lrp": "full_lrp_GammaLinear_POS_ENC_gammaConv",
    "pe_only": "full_lrp_GammaLinear_POS_ENC_PE_ONLY_gammaConv",
}
#: Official method whose branch upsamples a 14x14 map (used for the tie-heavy stand-in maps).
PATCH_MAP_METHOD = "custom_lrp"
ARCH = {"embed_dim": 64, "depth": 2, "num_heads": 2, "num_classes": 10, "patch_size": 16, "mlp_ratio": 4}
STEPS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
N_PIXELS = 224 * 224
#: Samples: (fixture image index, target rule). "pred": the class the model predicts for the image (the target
#: curve starts at 1); "second": its runner-up class (the target curve can rise as pixels are removed).
SAMPLES = ((0, "pred"), (1, "pred"), (0, "second"), (1, "second"))
#: Tie-heavy patch scores: ReLU(N(0, 1) + TIE_SHIFT), seeded per map; the shift makes about half of the
#: upsampled pixels exactly 0 (a pixel is 0 only where all four nearest patches are).
TIE_SHIFT = -1.0
TIE_SEED = 20251
MIN_ZERO_FRACTION = 0.40
CURVE_OPS = {"top": "top", "target": "target", "logits": "logits", "probabilities": "probalities"}


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_official_source(src: Path) -> None:
    """Refuse to run on anything but the official files of OFFICIAL_COMMIT."""
    wrong = [name for name, blob in OFFICIAL_BLOBS.items()
             if not (src / name).is_file() or git_blob_id(src / name) != blob]
    if wrong:
        raise SystemExit(f"--official-src {src}: these files are missing or differ from commit "
                         f"{OFFICIAL_COMMIT[:7]}: {', '.join(wrong)}; pass a checkout of that commit")


@contextlib.contextmanager
def official_runtime(src: Path):
    """Import path, CPU shims and instrumentation (module docstring), undone on exit."""
    sys.path.insert(0, str(src))
    stub_pkg, stub_mod = types.ModuleType("old"), types.ModuleType("old.model_ablation")

    def _unused_factory(*args, **kwargs):
        raise RuntimeError("old.model_ablation is a stub: the official code needs it only in __main__")

    stub_mod.deit_tiny_patch16_224 = _unused_factory
    stub_pkg.model_ablation = stub_mod
    sys.modules.setdefault("old", stub_pkg)
    sys.modules.setdefault("old.model_ablation", stub_mod)
    original_cuda, original_topk = torch.Tensor.cuda, torch.topk
    topk_calls: list[tuple[int, np.ndarray]] = []

    def cpu_cuda(self, *args, **kwargs):
        return self

    def recording_topk(input, k, *args, **kwargs):
        out = original_topk(input, k, *args, **kwargs)
        topk_calls.append((int(k), out[1].detach().cpu().numpy().copy()))
        return out

    torch.Tensor.cuda = cpu_cuda
    torch.topk = recording_topk
    try:
        yield topk_calls
    finally:
        torch.Tensor.cuda, torch.topk = original_cuda, original_topk
        sys.path.remove(str(src))


def official_args(method: str, work: Path, checkpoint: Path):
    """The argparse namespace the official scripts would build for ``--method method`` (defaults of
    analyze_pert_results.py: IMNET, variant basic, batch 1, normalized-pert 0, scale per, vis-class top)."""
    import config

    args = argparse.Namespace(method=method, variant="basic", data_set="IMNET", data_path="unused",
                              batch_size=1, normalized_pert=0, neg=0, scale="per", debug=False, wrong=False,
                              vis_class="top", is_ablation=False, output_dir=None, grid=False,
                              custom_trained_model=str(checkpoint), nb_classes=ARCH["num_classes"],
                              method_dir=str(work))
    with quiet():
        config.get_config(args, skip_further_testing=True)
        config.set_components_custom_lrp(args, gridSearch=False)
    return args


def official_model(args, checkpoint: Path):
    """``model_env(hooks=True)`` with the fixture's sizes instead of DeiT-Tiny's (shim, see docstring)."""
    from models.model import VisionTransformer

    comps = args.model_components
    model = VisionTransformer(
        patch_size=ARCH["patch_size"], embed_dim=ARCH["embed_dim"], depth=ARCH["depth"],
        num_heads=ARCH["num_heads"], mlp_ratio=ARCH["mlp_ratio"], qkv_bias=comps["isWithBias"],
        isWithBias=comps["isWithBias"], layer_norm=comps["norm"], activation=comps["activation"],
        attn_activation=comps["attn_activation"], last_norm=comps["last_norm"],
        attn_drop_rate=comps["attn_drop_rate"], drop_rate=comps["FFN_drop_rate"],
        patch_embed=comps["patch_embed"], isConvWithBias=comps["isConvWithBias"],
        projection_drop_rate=comps["projection_drop_rate"], num_classes=args.nb_classes)
    state = torch.load(checkpoint, map_location="cpu")["model"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The official Attention keeps a v_proj whose weights are views of the qkv weights (no checkpoint keys).
    missing = [key for key in missing if ".attn.v_proj." not in key]
    if missing or unexpected:
        raise SystemExit(f"{checkpoint}: missing keys {missing}, unexpected keys {unexpected}")
    dim = ARCH["embed_dim"]
    for blk in model.blocks:
        if not (torch.equal(blk.attn.v_proj.weight, blk.attn.qkv.weight[2 * dim:])
                and torch.equal(blk.attn.v_proj.bias, blk.attn.qkv.bias[2 * dim:])):
            raise SystemExit(f"{checkpoint}: v_proj does not share the loaded qkv value weights")
    return model.eval()


class PatchScoreLRP:
    """Stand-in for ``ViT_explanation_generator.LRP``: returns the given 14x14 patch scores (predicted-class
    call: ``index=None``; target call: ``index`` given), one sample per pair of calls, in loader order."""

    def __init__(self, pred_scores: torch.Tensor, target_scores: torch.Tensor):
        self.pred, self.target, self.row = pred_scores, target_scores, 0

    def generate_LRP(self, input, index=None, **kwargs):
        if index is None:
            return self.pred[self.row].reshape(1, -1).clone()
        out = self.target[self.row].reshape(1, -1).clone()
        self.row += 1
        return out


def run_official(args, model, lrp, images: torch.Tensor, targets: torch.Tensor, topk_calls: list,
                 record_removed: bool) -> dict:
    """Official maps (compute_saliency_and_save) and both perturbation runs (eval with neg=0, neg=1); with
    ``record_removed``, also the removed-pixel sets of every torch.topk call."""
    import h5py
    import generate_perturbations as gp
    import generate_visualizations as gv
    from dataset.expl_hdf5 import ImagenetResults

    device = torch.device("cpu")
    gv.lrp, gv.device = lrp, device
    gv.sample_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images, targets), batch_size=1, shuffle=False, num_workers=0)
    with quiet():
        gv.compute_saliency_and_save(args)
    with h5py.File(Path(args.method_dir) / "results.hdf5", "r") as f:
        out = {"pred_maps": f["vis_pred"][:, 0], "target_maps": f["vis_target"][:, 0]}
        if not (np.array_equal(f["image"][:], images.numpy())
                and np.array_equal(f["target"][:], targets.numpy())):
            raise SystemExit("official results.hdf5 does not hold the given images and targets")

    recorded: dict[str, tuple[np.ndarray, dict]] = {}
    original_calc_auc = gp.calc_auc

    def recording_calc_auc(perturbation_steps, matt, op):
        result = original_calc_auc(perturbation_steps, matt, op)
        recorded[op] = (np.array(matt, copy=True), result)
        return result

    gp.calc_auc = recording_calc_auc
    try:
        for sign, neg in (("pos", 0), ("neg", 1)):
            args.neg = neg
            with quiet():
                gp.imagenet_ds = ImagenetResults(args.method_dir)
            gp.sample_loader = torch.utils.data.DataLoader(gp.imagenet_ds, batch_size=1, shuffle=False,
                                                           num_workers=0, drop_last=False)
            gp.model, gp.device = model, device
            gp.exp_name = args.method + ("_neg" if neg else "_pos")
            recorded.clear()
            del topk_calls[:]
            with quiet():
                gp.eval(args)
            for key, op in CURVE_OPS.items():
                per_sample, result = recorded[op]
                out[f"{sign}_{key}"] = per_sample.T.copy()  # official [steps, n] -> [n, steps]
                out[f"auc_{sign}_{key}"] = np.float64(result[f"{gp.exp_name}_auc_{op}"])
            if record_removed:
                out.update(removed_sets(topk_calls, len(images), sign))
    finally:
        gp.calc_auc = original_calc_auc
    return out


@contextlib.contextmanager
def quiet():
    """The official functions print progress bars and per-step means; keep the console for this script."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def shared_maps(pred_maps: np.ndarray, target_maps: np.ndarray) -> dict:
    """Store each distinct map once: ``maps[pred_map_index[i]]`` is sample i's predicted-class map (rows that
    explain the same class of the same image get bitwise-identical maps from the official code)."""
    maps, pred_index, target_index = [], [], []
    for stack, index in ((pred_maps, pred_index), (target_maps, target_index)):
        for m in stack:
            hit = next((j for j, seen in enumerate(maps) if np.array_equal(seen, m)), None)
            if hit is None:
                maps.append(m)
                hit = len(maps) - 1
            index.append(hit)
    maps = np.stack(maps).astype(np.float32)
    return {"maps": maps, "pred_map_index": np.array(pred_index), "target_map_index": np.array(target_index),
            "zero_fraction": (maps == 0).mean(axis=(1, 2))}


def removed_sets(topk_calls: list, n: int, sign: str) -> dict:
    """Turn the recorded topk calls (per sample, per step: predicted map, then target map) into bit-packed
    removed-pixel sets ``[n, steps, N_PIXELS // 8]``."""
    if len(topk_calls) != n * len(STEPS) * 2:
        raise SystemExit(f"expected {n * len(STEPS) * 2} torch.topk calls, recorded {len(topk_calls)}")
    masks = np.zeros((2, n, len(STEPS), N_PIXELS), dtype=bool)
    for call, (k, idx) in enumerate(topk_calls):
        sample, rest = divmod(call, 2 * len(STEPS))
        step, which = divmod(rest, 2)
        if k != int(N_PIXELS * STEPS[step]) or idx.shape != (1, k):
            raise SystemExit(f"unexpected topk call {call}: k={k}, indices {idx.shape}")
        masks[which, sample, step, idx[0]] = True
    return {f"removed_{sign}_pred": np.packbits(masks[0], axis=-1),
            f"removed_{sign}_target": np.packbits(masks[1], axis=-1)}


def tie_patch_scores(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.relu(torch.randn(n, 14, 14, generator=gen, dtype=torch.float32) + TIE_SHIFT)


def versions() -> dict:
    names = ("torch", "torchvision", "timm", "zennit", "numpy", "h5py", "scikit-learn", "einops",
             "opencv-python-headless", "matplotlib")
    out = {"python": platform.python_version(), "torch_build": torch.__version__}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-src", type=Path, required=True,
                        help="official PE-AWARE-LRP code at commit 51eb418 (outside this repository)")
    parser.add_argument("--out", type=Path, default=Path("tests/data/official/vision"),
                        help="fixture folder: reads deit_d2.pth and images_raw.pt, writes official_pert_*.npz")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    opts = parser.parse_args()
    src, out_dir = opts.official_src.resolve(), opts.out
    check_official_source(src)
    torch.set_num_threads(opts.threads)
    checkpoint = out_dir / "deit_d2.pth"
    image_index = np.array([i for i, _ in SAMPLES], dtype=np.int64)
    images = torch.load(out_dir / "images_raw.pt")[image_index].contiguous()
    files = {}

    with official_runtime(src) as topk_calls, tempfile.TemporaryDirectory() as tmp:
        from generate_perturbations import imagenet_normalize
        from ViT_explanation_generator import LRP

        probe = official_model(official_args(METHODS["attnlrp"], Path(tmp), checkpoint), checkpoint)
        # one image at a time, like the official eval (batch size 1)
        logits = torch.cat([probe(imagenet_normalize(img[None].clone())).detach() for img in images])
        ranked = logits.argsort(dim=1, descending=True)
        targets = torch.tensor([int(ranked[i, 0 if rule == "pred" else 1]) for i, (_, rule) in enumerate(SAMPLES)],
                               dtype=torch.int64)
        common = {"image_index": image_index, "targets": targets.numpy(), "logits": logits.numpy(),
                  "pred": logits.argmax(1).numpy(), "steps": np.array(STEPS),
                  "k": np.array([int(N_PIXELS * p) for p in STEPS])}
        meta = {"official_commit": OFFICIAL_COMMIT, "device": "cpu", "dtype": "float32",
                "torch_threads": torch.get_num_threads(), "batch_size": 1, "versions": versions(),
                "arch": ARCH, "samples": [list(s) for s in SAMPLES], "machine": platform.machine(),
                "topk_call": "torch.topk(map.reshape(1, 50176) (negated for neg), k, dim=-1), float32, CPU"}

        jobs = [("ties", PATCH_MAP_METHOD)] + list(METHODS.items())
        for name, method in jobs:
            started = time.time()
            work = Path(tmp) / name
            work.mkdir()
            args = official_args(method, work, checkpoint)
            model = official_model(args, checkpoint)
            if name == "ties":
                scores = (tie_patch_scores(len(SAMPLES), TIE_SEED), tie_patch_scores(len(SAMPLES), TIE_SEED + 1))
                lrp = PatchScoreLRP(*scores)
            else:
                lrp = LRP(model)
            # removed-pixel sets only for the tie maps: those of the pixel-level LRP maps barely compress
            res = run_official(args, model, lrp, images, targets, topk_calls, record_removed=name == "ties")
            arrays = dict(common, **shared_maps(res.pop("pred_maps"), res.pop("target_maps")), **res)
            info = dict(meta, official_method=method, seconds=round(time.time() - started, 1))
            if name == "ties":
                arrays["patch_scores"] = np.concatenate([s.numpy() for s in scores])
                if len(arrays["maps"]) != 2 * len(SAMPLES) or arrays["zero_fraction"].min() < MIN_ZERO_FRACTION:
                    raise SystemExit(f"tie maps must be distinct with >= {MIN_ZERO_FRACTION:.0%} exact zeros")
                info["patch_scores"] = (f"relu(randn(14, 14) {TIE_SHIFT:+}) float32 from torch.Generator seeds "
                                        f"{TIE_SEED} (predicted-class maps), {TIE_SEED + 1} (target-class maps)")
            files[f"official_pert_{name}.npz"] = (arrays, info)

    for name, (arrays, info) in files.items():
        np.savez_compressed(out_dir / name, meta_json=np.array(json.dumps(info, sort_keys=True)), **arrays)
        print(f"wrote {out_dir / name} ({(out_dir / name).stat().st_size / 1024:.0f} KiB, {info['seconds']} s)")


if __name__ == "__main__":
    main()
