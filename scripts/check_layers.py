#!/usr/bin/env python3
"""Fails when a layer of src/mtron includes a higher one (docs/architecture.md, "Layers").

    check_layers.py [SOURCE_ROOT]      (default: the repository this script is in)

The layers, lowest first: core < kernels < comm < parallel < model < optim < data < checkpoint
< train < plan. A file may include its own layer and the layers below it, except plan, which
sits on core only; its command-line front end (the mtron_plan_cli files: `mtron plan`,
`mtron doctor` and --calibrate, which measures the kernels and the collectives) may include any
layer below plan. `mtron/embedded/` (the build's generated catalogs) may be included anywhere.
Prints one line per offending include and exits 1 if there is any, else prints a summary.
"""
import pathlib
import re
import sys

ORDER = ["core", "kernels", "comm", "parallel", "model", "optim", "data", "checkpoint", "train",
         "plan"]
PLAN_CLI = {"calibrate.cpp", "calibrate.h", "calibrate_gpu.cpp", "cli.cpp", "cli.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"mtron/([a-z_]+)/')


def allowed(layer, name, target):
    if target in ("embedded", layer):
        return True
    if target not in ORDER:
        return False
    if layer == "plan" and name not in PLAN_CLI:
        return target == "core"
    return ORDER.index(target) < ORDER.index(layer)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    src = root / "src" / "mtron"
    bad, files = [], 0
    for layer in ORDER:
        for path in sorted((src / layer).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
                continue
            files += 1
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and not allowed(layer, path.name, m.group(1)):
                    bad.append(f"{path.relative_to(root)}:{n}: layer {layer} includes "
                               f"{m.group(1)}: {line.strip()}")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layer order "
              f"{' < '.join(ORDER)} (plan: core only)")
        return 1
    print(f"check_layers: {files} files, every include follows {' < '.join(ORDER)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
