"""The coref contextualizer: annotation on hand-made clusters (the paper's Figure 1), windows and
cluster merging, the fastcoref wiring on tiny random models, and the offline rules backend."""

from __future__ import annotations

import pickle
import random
import re
from pathlib import Path

import pytest

from dapr.contextualizers.coref import (
    TOKENIZER_ONLY,
    Coref,
    FastCoref,
    RulesCoref,
    limit_antecedents,
)
from dapr.contextualizers.mentions import (
    Mention,
    annotate,
    apply_insertions,
    insertions,
    merge_clusters,
    to_mentions,
    tokenize,
    windows,
)
from dapr.data import Document, Passage
from dapr.errors import DaprError

HALF_MOON = [
    "The Half Moon is a pub and music venue in Putney, London. It has hosted live music since "
    "1963.",
    "The venue has hosted many famous bands, including the Rolling Stones. It is owned by Young's.",
    "Putney is a district of south-west London.",
]


def doc(title: str, texts: list[str], doc_id: str = "d") -> Document:
    passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, t) for i, t in enumerate(texts))
    return Document(doc_id, title, passages)


def at(passages: list[str], p: int, phrase: str, nth: int = 0) -> Mention:
    """The ``nth`` occurrence of ``phrase`` in passage ``p``."""
    starts = [m.start() for m in re.finditer(re.escape(phrase), passages[p])]
    return Mention(p, starts[nth], starts[nth] + len(phrase))


def words_of(text: str) -> list[str]:
    return text.split()


def remove_insertions(text: str, inserted: list[tuple[int, str]]) -> str:
    """Undo :func:`apply_insertions` (offsets refer to the original text)."""
    shift = 0
    for offset, addition in inserted:
        start = offset + shift
        assert text[start : start + len(addition)] == addition
        text = text[:start] + text[start + len(addition) :]
    return text


# ------------------------------------------------------------------- annotation


def test_figure_1_the_venue_gets_its_antecedent_from_the_first_paragraph():
    cluster = [
        at(HALF_MOON, 0, "The Half Moon"),
        at(HALF_MOON, 0, "It"),
        at(HALF_MOON, 1, "The venue"),
        at(HALF_MOON, 1, "It"),
    ]
    out = annotate(HALF_MOON, [cluster])
    assert out[0] == HALF_MOON[0]  # coreference inside the first paragraph adds nothing
    assert out[1] == (
        "The venue (The Half Moon) has hosted many famous bands, including the Rolling Stones. "
        "It (The Half Moon) is owned by Young's."
    )
    assert out[2] == HALF_MOON[2]  # no cross-paragraph mention: unchanged


def test_coreference_inside_one_paragraph_adds_nothing():
    clusters = [
        [at(HALF_MOON, 1, "The venue"), at(HALF_MOON, 1, "It")],
        [at(HALF_MOON, 0, "The Half Moon"), at(HALF_MOON, 0, "It")],
    ]
    assert annotate(HALF_MOON, clusters) == HALF_MOON
    assert annotate(HALF_MOON, []) == HALF_MOON


def test_antecedent_is_the_earliest_mention_that_is_not_a_pronoun():
    texts = ["It opened in 1900.", "The Half Moon is a pub.", "The venue hosts bands. So does it."]
    cluster = [
        at(texts, 0, "It"),
        at(texts, 1, "The Half Moon"),
        at(texts, 2, "The venue"),
        at(texts, 2, "it"),
    ]
    out = annotate(texts, [cluster])
    assert out[0] == texts[0]
    assert out[1] == texts[1]  # its text is the antecedent itself
    assert out[2] == "The venue (The Half Moon) hosts bands. So does it (The Half Moon)."
    # a cluster of pronouns only names nothing
    assert annotate(texts, [[at(texts, 0, "It"), at(texts, 2, "it")]]) == texts


def test_a_mention_equal_to_its_antecedent_gets_nothing():
    texts = ["The Half Moon is a pub.", "the half moon's garden, the Half Moon, THE HALF MOON"]
    cluster = [
        at(texts, 0, "The Half Moon"),
        at(texts, 1, "the half moon's"),
        at(texts, 1, "the Half Moon"),
        at(texts, 1, "THE HALF MOON"),
    ]
    assert annotate(texts, [cluster]) == texts


def test_nested_and_same_end_mentions_keep_the_text_intact():
    texts = [
        "The Half Moon is a pub owned by John Smith.",
        "The venue's owner sold it. His pub was sold.",
    ]
    venue = [at(texts, 0, "The Half Moon"), at(texts, 1, "The venue"), at(texts, 1, "it")]
    owner = [at(texts, 0, "John Smith"), at(texts, 1, "The venue's owner"), at(texts, 1, "His")]
    # "His pub" and "pub" end at the same character: the longer mention's antecedent wins
    pub = [at(texts, 0, "a pub"), at(texts, 1, "pub")]
    his_pub = [at(texts, 0, "The Half Moon"), at(texts, 1, "His pub")]
    out = annotate(texts, [venue, owner, pub, his_pub])
    assert out[1] == (
        "The venue (The Half Moon)'s owner (John Smith) sold it (The Half Moon). "
        "His (John Smith) pub (The Half Moon) was sold."
    )


def test_the_original_text_is_recovered_by_removing_the_insertions():
    rng = random.Random(5)
    words = words_of("the venue it has hosted bands in Putney (London) and its owner")
    for _ in range(200):
        texts = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(4)]
        clusters = []
        for _ in range(rng.randint(0, 5)):
            cluster = []
            for _ in range(rng.randint(1, 5)):
                p = rng.randrange(4)
                start = rng.randrange(len(texts[p]))
                cluster.append(Mention(p, start, rng.randint(start + 1, len(texts[p]))))
            clusters.append(cluster)
        out = annotate(texts, clusters)
        inserted = insertions(texts, clusters)
        assert len(out) == len(texts)
        assert out == [apply_insertions(t, i) for t, i in zip(texts, inserted)]
        assert [remove_insertions(o, i) for o, i in zip(out, inserted)] == texts


def test_a_mention_outside_its_passage_is_a_one_line_error():
    with pytest.raises(DaprError, match=r"coref: mention \(1, 3, 99\) is not inside") as error:
        annotate(["a b", "c d"], [[Mention(0, 0, 1), Mention(1, 3, 99)]])
    assert "\n" not in str(error.value)


# ------------------------------------------------------------- windows and token spans


def test_windows_cover_every_token_with_the_requested_overlap():
    assert windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert windows(3, 4, 1) == [(0, 3)]
    assert windows(0, 4, 1) == []
    assert windows(11, 4, 2) == [(0, 4), (2, 6), (4, 8), (6, 10), (7, 11)]
    for n in range(1, 60):
        found = windows(n, 8, 3)
        assert found[0][0] == 0 and found[-1][1] == n
        assert all(e - s == min(8, n) for s, e in found)
        assert all(b[0] <= a[1] - 3 for a, b in zip(found, found[1:]))


def test_clusters_sharing_a_mention_across_windows_merge():
    predictions = [
        (0, [[(0, 1), (5, 6)], [(2, 3), (3, 4)]]),
        (4, [[(1, 2), (8, 9)]]),  # (1, 2) here is (5, 6) of the document
        (10, [[(0, 2), (4, 5)]]),  # shares nothing: stays apart
    ]
    assert sorted(merge_clusters(predictions)) == [
        [(0, 1), (5, 6), (12, 13)],
        [(2, 3), (3, 4)],
        [(10, 12), (14, 15)],
    ]


def test_token_spans_become_character_mentions_inside_one_passage():
    from dapr.contextualizers.spacy_models import spacy_pipeline

    texts = ["The Half Moon is a pub.", "  The venue, in Putney."]
    tokens = tokenize(spacy_pipeline("en_core_web_sm", disable=TOKENIZER_ONLY), texts)
    words = [texts[t.passage][t.start : t.end] for t in tokens]
    assert words == words_of("The Half Moon is a pub . The venue , in Putney .")
    clusters = [[(0, 3), (7, 9)], [(5, 8), (11, 12)], [(4, 6), (6, 7)]]
    # (5, 8) runs across the passages: dropped, which leaves that cluster a single mention
    assert to_mentions(tokens, clusters) == [
        [Mention(0, 0, 13), Mention(1, 2, 11)],
        [Mention(0, 17, 22), Mention(0, 22, 23)],
    ]


def test_fastcoref_backend_on_a_stubbed_prediction_links_windows():
    """The model is replaced by a stub that finds the true clusters inside each window:
    "The Half Moon" and "The venue" never share a window, "It" links them in an overlap."""
    texts = ["The Half Moon is a pub. It is in Putney.", "The venue has hosted bands."]
    truth = [(0, 3), (7, 8), (12, 14)]  # The Half Moon, It, The venue (document token spans)
    seen: list[list[str]] = []
    coref = Coref(window=10, overlap=5)

    def predict(inputs):
        seen.extend(inputs)
        starts = [s for s, _ in windows(18, 10, 5)]
        out = []
        for start in starts[: len(inputs)]:
            inside = [(s - start, e - start) for s, e in truth if start <= s and e <= start + 10]
            out.append([inside] if len(inside) > 1 else [])
        return out

    coref.predict = predict
    out = coref.contextualize(doc("The Half Moon", texts))
    assert seen == [
        ["The", "Half", "Moon", "is", "a", "pub", ".", "It", "is", "in"],
        ["pub", ".", "It", "is", "in", "Putney", ".", "The", "venue", "has"],
        ["is", "in", "Putney", ".", "The", "venue", "has", "hosted", "bands", "."],
    ]
    assert out == [texts[0], "The venue (The Half Moon) has hosted bands."]


# --------------------------------------------------------------------- the contextualizer


def test_backends_choose_their_class_and_how_the_pipeline_runs_them():
    neural, rules = Coref(), Coref(backend="rules")
    assert type(neural) is FastCoref and type(rules) is RulesCoref
    assert isinstance(neural, Coref) and neural.version == rules.version == "1"
    assert neural.parallel is False and hasattr(neural, "contextualize_batch")
    assert rules.parallel is True and not hasattr(rules, "contextualize_batch")
    for component in (neural, rules):
        again = pickle.loads(pickle.dumps(component))
        assert type(again) is type(component) and again.__dict__ == component.__dict__
    identity = rules.identity()
    assert identity["backend"] == "rules" and identity["max_antecedents"] == 50
    assert "window" not in identity and "model" not in identity


def test_the_pipeline_runs_rules_in_workers_and_fastcoref_in_batches():
    from dapr.experiment.chain import Chain, ContextStep

    assert Chain([ContextStep("coref", {"backend": "rules"})]).parallel(0) is True
    assert Chain([ContextStep("title"), ContextStep("coref")]).parallel(1) is False


def test_missing_fastcoref_package_is_a_one_line_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "fastcoref" else real(name, *a),
    )
    with pytest.raises(
        DaprError, match=r'needs fastcoref; install it with: pip install "dapr-ir\[coref\]"'
    ):
        Coref().contextualize(doc("The Half Moon", HALF_MOON))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"backend": "allennlp"}, "unknown backend 'allennlp'; choose from: fastcoref, rules"),
        ({"window": 100, "overlap": 100}, "need window >= 1 and 0 <= overlap < window"),
        ({"max_antecedents": 0}, "max_antecedents and batch_size must be at least 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    with pytest.raises(DaprError, match=re.escape(message)):
        Coref(**args)


def test_a_hub_model_missing_offline_is_the_standard_error():
    coref = Coref(model="biu-nlp/f-coref")
    with pytest.raises(DaprError, match="cannot load model 'biu-nlp/f-coref': no local copy"):
        coref.contextualize(doc("The Half Moon", HALF_MOON))


def test_limit_antecedents_masks_all_but_the_closest_candidates():
    import torch

    class Model:
        def _mask_antecedent_logits(self, logits, span_mask):
            return logits

    model = Model()
    limit_antecedents(model, 2)
    masked = model._mask_antecedent_logits(torch.zeros(1, 5, 5), torch.ones(1, 5))
    allowed = masked[0] > -10000
    for i in range(5):
        assert [j for j in range(5) if allowed[i, j]] == [j for j in range(5) if j >= i - 2]


# ------------------------------------------------------------- tiny random fastcoref models


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tiny_coref import tiny_fastcoref

    texts = HALF_MOON + WIKI_LIKE
    base = tmp_path_factory.mktemp("coref")
    return {kind: tiny_fastcoref(base / kind, texts, kind=kind) for kind in ("fcoref", "lingmess")}


WIKI_LIKE = [
    "Albert Einstein was a German-born theoretical physicist. His father was Hermann Einstein.",
    "He developed the theory of relativity. Einstein received the Nobel Prize in 1921.",
    "The prize was awarded for his services to theoretical physics.",
]


@pytest.mark.parametrize("kind", ["fcoref", "lingmess"])
def test_tiny_fastcoref_model_loads_offline_and_annotates(tiny_models, kind):
    from fastcoref import FCoref, LingMessCoref

    documents = [doc("The Half Moon", HALF_MOON, "a"), doc("Albert Einstein", WIKI_LIKE, "b")]
    coref = Coref(model=str(tiny_models[kind]), window=12, overlap=4, max_antecedents=3)
    state = random.getstate()
    loaded = coref.coref_model
    assert random.getstate() == state  # fastcoref reseeds the generators; we restore them
    assert type(loaded) is {"fcoref": FCoref, "lingmess": LingMessCoref}[kind]
    identity = coref.identity()
    assert identity["revision"].startswith("sha256:")
    assert (identity["window"], identity["max_antecedents"]) == (12, 3)

    found = coref.clusters_batch(documents)
    out = coref.contextualize_batch(documents)
    assert coref.contextualize(documents[1]) == out[1]
    for document, clusters, texts in zip(documents, found, out):
        originals = [p.text for p in document.passages]
        assert len(texts) == len(originals)
        assert texts == annotate(originals, clusters)
        assert [re.sub(r" \([^()]*\)", "", t) for t in texts] == originals
        for cluster in clusters:
            for m in cluster:
                assert 0 <= m.start < m.end <= len(originals[m.passage])
    assert any(found), "a random model still predicts some clusters"


def test_tiny_model_scores_only_the_closest_antecedents(tiny_models):
    coref = Coref(model=str(tiny_models["fcoref"]), window=40, max_antecedents=3)
    logits = []
    handle = coref.coref_model.model.register_forward_hook(
        lambda module, inputs, outputs: logits.append(outputs[-1])
    )
    try:
        coref.contextualize(doc("Albert Einstein", WIKI_LIKE))
    finally:
        handle.remove()
    final = logits[0][0]  # [k, k + 1]: the last column is the null antecedent
    k = final.shape[0]
    assert k > 5
    for i in range(k):
        for j in range(k):  # masking subtracts 10000 from a small logit
            assert (final[i, j] > -5000) == (i - 3 <= j < i), (i, j)
        assert final[i, k] == 0


# --------------------------------------------------------------------------- rules backend


def test_rules_figure_1_style_document():
    document = doc("The Half Moon, Putney", HALF_MOON)
    out = Coref(backend="rules").contextualize(document)
    assert out == [
        HALF_MOON[0],
        "The venue (The Half Moon) has hosted many famous bands, including the Rolling Stones. "
        "It (The Half Moon) is owned by Young's.",
        HALF_MOON[2],
    ]


def test_rules_person_article():
    out = Coref(backend="rules").contextualize(doc("Albert Einstein", WIKI_LIKE))
    assert out == [
        WIKI_LIKE[0],
        "He (Albert Einstein) developed the theory of relativity. Einstein (Albert Einstein) "
        "received the Nobel Prize in 1921.",
        "The prize was awarded for his (Albert Einstein) services to theoretical physics.",
    ]


def test_rules_genders_objects_and_expletive_it():
    texts = [
        "Ada Lovelace was an English mathematician. She worked with Charles Babbage.",
        "She is regarded as the first computer programmer. He called her the Enchantress of "
        "Numbers.",
        "Acme Corporation is an American company based in Ohio. It is said that anvils are heavy.",
    ]
    out = Coref(backend="rules").contextualize(doc("Ada Lovelace", texts))
    assert out[1] == (
        "She (Ada Lovelace) is regarded as the first computer programmer. He (Charles Babbage) "
        "called her (Ada Lovelace) the Enchantress of Numbers."
    )
    assert out[2] == texts[2]


def test_rules_company_and_max_antecedents():
    texts = ["The Half Moon is a pub in Putney.", "Tom Jones sang there. It is popular."]
    document = doc("Pubs in London", texts)
    found = {
        n: Coref(backend="rules", max_antecedents=n).contextualize(document)[1] for n in (50, 2, 1)
    }
    assert found[50] == "Tom Jones sang there. It (The Half Moon) is popular."
    assert found[2] == "Tom Jones sang there. It (Putney) is popular."  # Putney, Tom Jones left
    assert found[1] == texts[1]  # only Tom Jones is a candidate, and not for "it"
    company = doc(
        "Acme Corporation",
        ["Acme Corporation is an American company based in Ohio.", "The company makes anvils."],
    )
    assert Coref(backend="rules").contextualize(company)[1] == (
        "The company (Acme Corporation) makes anvils."
    )


def test_rules_on_real_articles_keep_one_text_per_passage():
    from dapr.data_loaders.wiki_sample import adapter

    from dapr.contextualizers.coref_rules import resolve
    from dapr.contextualizers.spacy_models import spacy_pipeline

    several = [d for d in adapter.load().corpus if len(d.passages) >= 4]
    documents = sorted(several, key=lambda d: sum(len(p.text) for p in d.passages))[:5]
    coref = Coref(backend="rules")
    nlp = spacy_pipeline("en_core_web_sm")
    added = 0
    for document in documents:
        texts = [p.text for p in document.passages]
        clusters = resolve(document.title, texts, nlp)
        out = coref.contextualize(document)
        inserted = insertions(texts, clusters)
        assert len(out) == len(texts)
        assert [remove_insertions(o, i) for o, i in zip(out, inserted)] == texts
        added += sum(len(i) for i in inserted)
    assert added > 0
