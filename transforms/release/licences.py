"""Licences of a release and of the sources its items were made from.

A release declares one licence (the recipe's `release.licence`, else its top-level `licence`); every
source it used declares its own (`SourceSpec`). `licence_conflicts` refuses a release whose sources
do not allow its licence: a no-derivatives source allows no release, a non-commercial source needs a
non-commercial release, a share-alike source (CC BY-SA, ODbL, CDLA-Sharing, GPL) needs the same
terms, and a source whose licence we cannot classify cannot be checked, so it is refused too.
Permissive sources (CC BY, CC0, MIT, Apache, AFL, BSD, CDLA-Permissive) allow any licence with
attribution, which the card gives.

The bundled samples' licences (lake/samples/README.md) are also in `lake/samples/licences.yaml`,
keyed by file patterns, so a release of a bundled file finds its sources by itself.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

REPO = Path(__file__).resolve().parents[2]
SAMPLE_LICENCES = REPO / "lake" / "samples" / "licences.yaml"

# Licence identifiers the Hub documents (hf.co/docs/hub/repositories-licenses), lowercase as the card wants them.
_HUB_LICENCE_IDS = """
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
lgpl-2.1 lgpl-3.0 isc h-research intel-research lppl-1.3c ms-pl apple-ascl mpl-2.0 odc-by odbl openrail++ osl-3.0
postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr unknown other
"""
HUB_LICENCES = frozenset(_HUB_LICENCE_IDS.split())
_PERMISSIVE = re.compile(r"^(mit|apache-2\.0|afl-3\.0|bsd.*|cc0-1\.0|cc-by-[0-9.]+|cdla-permissive-.*|isc|unlicense|"
                         r"pddl|odc-by|zlib|postgresql|wtfpl|bsl-1\.0|ecl-2\.0|ncsa|etalab-2\.0)$")
_SHARE_ALIKE_EXACT = re.compile(r"^(odbl|cdla-sharing-1\.0|gpl.*|agpl-3\.0|lgpl.*|gfdl|eupl-.*|mpl-2\.0|epl-.*)$")


class LicenceError(ValueError):
    """A licence that is missing or not one the Hub knows, named with its key."""


class SourceSpec(BaseModel):
    """A source the items were made from, as the card credits it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., description="What the source is, e.g. 'XCOPA (Tamil)'.")
    licence: str = Field(..., description="Its licence, an SPDX id (CC-BY-4.0) or the Hub's id (cc-by-4.0).")
    url: str | None = Field(None, description="Where it is published.")
    hub_id: str | None = Field(None, description="Its Hub dataset id (source_datasets: extended|<id>).")
    attribution: str | None = Field(None, description="Whom to credit, as the licence asks.")
    citation: str | None = Field(None, description="BibTeX of the paper to cite.")
    note: str | None = Field(None, description="How it was used (e.g. 'topic seeds only').")


def hub_licence(value: str | None, key: str = "licence") -> str:
    """The Hub's identifier for an SPDX or Hub licence id; raises LicenceError naming `key`."""
    if value is None or not str(value).strip():
        raise LicenceError(f"{key}: no licence declared; set it (an SPDX id such as CC-BY-4.0)")
    lic = str(value).strip().lower()
    if lic not in HUB_LICENCES:
        raise LicenceError(f"{key}: {value!r} is not a licence id the Hub knows (e.g. cc-by-4.0, cc-by-sa-4.0, "
                           "mit, apache-2.0, afl-3.0)")
    return lic


def _allows(source: str, release: str) -> str | None:
    """Why `source`'s licence does not allow a release under `release` (None: it allows it)."""
    if source == release or _PERMISSIVE.match(source):
        return None
    if source.startswith("cc-by-") and "-nd-" in f"{source}-":
        return "its licence allows no derivatives"
    if source.startswith("cc-by-nc") and not release.startswith("cc-by-nc"):
        return "its licence is non-commercial, the release's is not"
    if source.startswith("cc-by") and "-sa-" in source:
        nc = source.startswith("cc-by-nc")
        if "-sa-" in release and release.startswith("cc-by-nc") == nc and release >= source:
            return None  # a later version of the same share-alike terms
        return "its licence is share-alike: the release must carry the same terms"
    if _SHARE_ALIKE_EXACT.match(source):
        return "its licence is share-alike: the release must carry the same licence"
    if source.startswith("cc-by-nc") and release.startswith("cc-by-nc"):
        return None
    return "its licence cannot be checked for compatibility"


def licence_conflicts(release_licence: str, sources: list[SourceSpec]) -> list[str]:
    """One line per source whose licence does not allow the release's, naming the source."""
    release = hub_licence(release_licence)
    out = []
    for s in sources:
        try:
            lic = hub_licence(s.licence, f"source {s.name!r}")
        except LicenceError as err:
            out.append(f"licence: {err}")
            continue
        why = _allows(lic, release)
        if why:
            out.append(f"licence: source {s.name!r} is {s.licence} and the release is {release_licence}: {why}")
    return out


def load_sample_licences(path: Path = SAMPLE_LICENCES) -> list[tuple[list[str], list[SourceSpec]]]:
    """(file patterns, sources) for each entry of lake/samples/licences.yaml."""
    if not path.exists():
        return []
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    known = {k: SourceSpec.model_validate(v) for k, v in (data.get("sources") or {}).items()}
    return [([str(p) for p in e["files"]], [known[n] for n in e["sources"]]) for e in data.get("files") or []]


def sources_of_file(path: str | Path, registry: list[tuple[list[str], list[SourceSpec]]] | None = None
                    ) -> list[SourceSpec]:
    """The sources of a bundled or shared data file (or a folder of them), from the registry; [] if unknown."""
    text = Path(path).resolve().as_posix()
    for patterns, sources in load_sample_licences() if registry is None else registry:
        if any(fnmatch.fnmatch(text, p) or fnmatch.fnmatch(text + "/", p) for p in patterns):
            return list(sources)
    return []


def unique_sources(sources: list[SourceSpec]) -> list[SourceSpec]:
    seen: dict[str, SourceSpec] = {}
    for s in sources:
        seen.setdefault(s.name, s)
    return list(seen.values())
