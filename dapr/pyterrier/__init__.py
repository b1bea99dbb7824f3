"""dapr in PyTerrier (the ``pyterrier`` extra; no Java needed): datasets, retrievers, rerankers,
contextualizers and the document-aware fusions as ``pt.Transformer`` s:

```python
import pyterrier as pt
from pyterrier.measures import RR, nDCG

import dapr.pyterrier as dpt

wiki = dpt.dataset("wiki-sample")
passages = dpt.DaprRetriever(wiki, "bm25", level="passage")
documents = dpt.DaprRetriever(wiki, "bm25", level="document")
fused = dpt.DocumentFusion(wiki, documents, passages, "convex", alpha=0.3)
pt.Experiment([passages, fused], wiki.get_topics("test"), wiki.get_qrels("test"),
              [nDCG @ 10, RR @ 10], names=["bm25", "bm25 + documents"])
```

Document-level systems are judged as ``dapr run`` judges them with
``wiki.get_qrels("test", level="document")``. ``DocumentFusion(..., "hierarchical", alpha=0.2)``
scores only the passages of the retrieved documents; :func:`fuse` fuses two result frames
from anywhere (a document-level and a passage-level one).

The numbers are dapr's (``tests/test_pyterrier.py``), with one difference of ir_measures: its
``RR@10`` breaks score ties by ascending docno, where trec_eval and dapr rank tied items by
descending id; ``RR`` of ``system % 10`` is trec_eval's, and dapr's, ``RR@10``.
"""

from __future__ import annotations

from dapr.errors import DaprError

try:
    import pyterrier  # noqa: F401
except ImportError:
    raise DaprError(
        'dapr.pyterrier needs PyTerrier; install it with: pip install "dapr-ir[pyterrier]"'
    ) from None

from dapr.pyterrier.frames import DaprDataset, dataset, frame_run, run_frame  # noqa: E402
from dapr.pyterrier.transformers import (  # noqa: E402
    DaprContextualizer,
    DaprReranker,
    DaprRetriever,
    DocumentFusion,
    fuse,
)

__all__ = [
    "DaprContextualizer",
    "DaprDataset",
    "DaprReranker",
    "DaprRetriever",
    "DocumentFusion",
    "dataset",
    "frame_run",
    "fuse",
    "run_frame",
]
