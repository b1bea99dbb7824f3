"""The Genomics adapter, built from a small synthetic Highwire collection.

The Highwire HTML files are not in ``../shared/data``. The collection written here puts real texts
into HTML files laid out byte by byte, with a ``legalspans.txt`` giving their spans:

- the three articles that the dump sample's topic 160 judges (``test.jsonl``, title span
  included) and the three articles of its ``corpus.jsonl``: every dump chunk becomes one legal
  span, so the built passages must equal the dump's;
- four PMIDs of the real 2007 gold standard, whose legal spans are placed around the real gold
  offsets (filled with the texts of ``Genomics.examples.csv`` and the dump).

2007 uses the real ``2007topics.txt`` and gold standard; 2006 a hand-made topics and raw
relevance file in the TREC format, judging the spans the dump judges with the dump's grades.
Expected qrels are computed here from the files with plain Python.
"""

from __future__ import annotations

import ast
import csv
import html
import json
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from dapr.data_loaders import genomics

from dapr.errors import DataError

DUMP = "dapr-dump-sample/Genomics"
GOLD_DIR = "genomics-2007"
GOLD = "trecgen2007.gold.standard.tsv.txt"
GOLD_PMIDS = ("11914328", "13130152", "12466207", "14747618")


def normalized(text: str) -> str:
    """The passage text rule, stated independently: strip, one CRLF per line-break run."""
    return re.sub(r"[\r\n]+", "\r\n", text.strip()) + "\r\n"


def fragment(text: str, length: int | None = None) -> tuple[bytes, str]:
    """``<p>text</p>`` as Latin-1 bytes padded with spaces to ``length`` (the text cut to fit),
    and the text it holds."""
    while True:
        data = f"<p>{html.escape(text, quote=False)}</p>".encode("latin-1", "xmlcharrefreplace")
        if length is None:
            return data, text
        if len(data) <= length:
            return data + b" " * (length - len(data)), text
        text = text[: max(0, len(text) - (len(data) - length) - 1)]


@dataclass
class Layout:
    """One synthetic article: its HTML and legal spans ``(start, length)``, the title span first."""

    pmid: str
    html: bytes
    spans: list[tuple[int, int]]
    texts: list[str]
    """The text put into each span (the title span's is the title)."""


def contiguous(pmid: str, title: str, head: str, chunks: list[str]) -> Layout:
    """An article whose spans follow each other: the title span, then one per chunk."""
    pieces = [f"<h2>{html.escape(title, quote=False)}</h2>{html.escape(head)}".encode("latin-1")]
    texts = [title]
    for chunk in chunks:
        data, text = fragment(chunk.removesuffix("\r\n"))
        pieces.append(data)
        texts.append(text)
    body, spans = b"", []
    for piece in pieces:
        body += b"\n"  # between spans, outside any
        spans.append((len(body), len(piece)))
        body += piece
    return Layout(pmid, body + b"\n", spans, texts)


def around_gold(pmid: str, intervals: list[tuple[int, int]], texts: list[str]) -> Layout:
    """An article with legal spans around the gold ``(offset, length)`` intervals.

    Intervals closer than 40 bytes form one cluster. The first cluster of a single interval gets
    a span of exactly its offset and length; longer clusters are cut into two spans; others get
    a span 5 bytes wider on each side. Wide gaps get an unjudged span of their own.
    """
    clusters: list[list[int]] = []
    for start, length in sorted(intervals):
        if clusters and start < clusters[-1][1] + 40:
            clusters[-1][1] = max(clusters[-1][1], start + length)
            clusters[-1][2] += 1
        else:
            clusters.append([start, start + length, 1])
    spans = [(0, 200)]
    exact_done = False
    for start, end, members in clusters:
        cursor = spans[-1][0] + spans[-1][1]
        if start - cursor > 300:
            spans.append((cursor + 10, start - cursor - 20))
        if members == 1 and not exact_done:
            spans.append((start, end - start))
            exact_done = True
        elif end - start > 1500:
            middle = (start + end) // 2
            spans += [(start - 5, middle - start + 5), (middle, end + 5 - middle)]
        else:
            spans.append((start - 5, end - start + 10))
    body = bytearray(b" " * (spans[-1][0] + spans[-1][1] + 50))
    title = f"\r\nArticle {pmid}\r\n"
    head = f"<h2>{title}</h2>".encode()
    body[0 : len(head)] = head
    used = [title]
    for i, (start, length) in enumerate(spans[1:]):
        data, text = fragment(texts[i % len(texts)].removesuffix("\r\n"), length)
        body[start : start + length] = data
        used.append(text)
    return Layout(pmid, bytes(body), spans, used)


# --- the collection -----------------------------------------------------------------------------


def dump_rows(shared: Path, split: str = "test") -> list[dict]:
    lines = (shared / DUMP / f"{split}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def dump_corpus(shared: Path) -> list[dict]:
    return [json.loads(line) for line in (shared / DUMP / "corpus.jsonl").read_text().splitlines()]


def gold_rows(shared: Path) -> list[tuple[str, str, int, int]]:
    rows = []
    for line in (shared / GOLD_DIR / GOLD).read_text(encoding="latin-1").splitlines():
        topic, pmid, offset, length = line.split("\t")[:4]
        rows.append((topic, pmid, int(offset), int(length)))
    return rows


def example_texts(shared: Path) -> dict[str, list[str]]:
    csv.field_size_limit(1 << 30)
    with (shared / "dapr-raw-sample" / "Genomics.examples.csv").open(encoding="utf-8") as f:
        return {row["doc_id"]: ast.literal_eval(row["chunks"]) for row in csv.DictReader(f)}


def layouts(shared: Path) -> dict[str, list[Layout]]:
    """Journal archive -> its articles in order."""
    judged_docs = []
    for row in dump_rows(shared):
        doc = row["judged_chunks"][0]["belonging_doc"]
        chunk0 = doc["chunks"][0]["text"]
        head = chunk0[len(doc["title"].strip()) :]  # the authors after the title
        judged_docs.append(
            contiguous(doc["id"], doc["title"], head, [c["text"] for c in doc["chunks"][1:]])
        )
    plain = [
        contiguous(doc["id"], doc["title"], "", [c["text"] for c in doc["chunks"]])
        for doc in dump_corpus(shared)
    ]
    title_only = contiguous("10901399", "\r\nA title without a body\r\n", "", [])
    gold = gold_rows(shared)
    texts = example_texts(shared)
    fallback = [c["text"] for c in dump_corpus(shared)[1]["chunks"]]
    around = {
        pmid: around_gold(
            pmid,
            sorted({(o, n) for _, p, o, n in gold if p == pmid}),
            texts.get(pmid, fallback),
        )
        for pmid in GOLD_PMIDS
    }
    return {
        "ajepidem": [*plain, title_only],
        "euroheartj": [around["11914328"]],
        "jbc-2003": [around["13130152"], around["12466207"], around["14747618"]],
        "jgenviro": judged_docs,
    }


TOPICS_2006 = (
    "<160>What is the role of PrnP in mad cow disease?\r\n"
    "<161>What is the role of IDE in Alzheimer\u2019s disease\r\n"
    "<162>What [GENES] are involved in the testimony of Dr. Snow?\r\n"
)


def raw_2006(arts: dict[str, Layout]) -> str:
    """A TREC 2006 raw relevance file judging spans of the articles (see module docstring)."""

    def span(pmid: str, i: int, trim: int = 0) -> str:
        start, length = arts[pmid].spans[i]
        return f"{start + trim}\t{length - 2 * trim}"

    rows = [
        f"160\t15722549\t{span('15722549', 10)}\tPRNP\tPOSSIBLY",
        f"160\t15269389\t{span('15269389', 14, trim=10)}\tPRNP\tDEFINITELY",
        f"160\t15722550\t{span('15722550', 4)}\tPRNP\tPOSSIBLY",
        f"160\t15722550\t{span('15722550', 5)}\tPRNP\tNOT",
        f"160\t15722550\t{span('15722550', 4)}\tPRION\tPOSSIBLY",
        f"161\t10901322\t{span('10901322', 0)}\tIDE\tDEFINITELY",
        f"162\t10901323\t{span('10901323', 3)}\tSNOW\tPOSSIBLY",
        f"162\t10901323\t{span('10901323', 3, trim=3)}\tSNOW\tDEFINITELY",
        "160\t99999999\t0\t10\tPRNP\tDEFINITELY",
    ]
    header = "# TREC 2006 Genomics raw relevance\n# made up for tests\n# topic pmid offset ...\n"
    return header + "\n".join(rows) + "\n"


def write_source(root: Path, shared: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    by_journal = layouts(shared)
    spans_lines = []
    for journal in genomics.JOURNALS:
        with zipfile.ZipFile(root / f"{journal}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
            if journal in by_journal:
                archive.writestr(f"{journal}/", b"")
            for art in by_journal.get(journal, []):
                archive.writestr(f"{journal}/{art.pmid}.html", art.html)
                spans_lines += [f"{art.pmid}\t{s}\t{n}" for s, n in art.spans]
    (root / genomics.LEGALSPANS).write_text("\n".join(spans_lines) + "\n")
    arts = {a.pmid: a for journal in by_journal.values() for a in journal}
    (root / genomics.TOPICS["2006"]).write_bytes(TOPICS_2006.encode("cp1252"))
    (root / genomics.JUDGEMENTS["2006"]).write_text(raw_2006(arts))
    shutil.copy(shared / GOLD_DIR / "2007topics.txt", root / genomics.TOPICS["2007"])
    shutil.copy(shared / GOLD_DIR / GOLD, root / genomics.JUDGEMENTS["2007"])
    return root


@pytest.fixture(scope="module")
def shared_data(shared_file) -> Path:
    """The shared samples, with the 2007 gold standard: its judgements come from the track's
    protected area, so tests/fixtures does not ship it (nor the rest of these tests' files)."""
    gold = shared_file(f"{GOLD_DIR}/{GOLD}", "TREC Genomics 2007 judgements, not shipped")
    return gold.parents[1]


@pytest.fixture(scope="module")
def arts(shared_data: Path) -> dict[str, Layout]:
    return {a.pmid: a for journal in layouts(shared_data).values() for a in journal}


@pytest.fixture(scope="module")
def source(tmp_path_factory, shared_data: Path) -> Path:
    return write_source(tmp_path_factory.mktemp("genomics"), shared_data)


@pytest.fixture(scope="module")
def built(source: Path):
    return genomics.adapter.build(source)


@pytest.fixture(scope="module")
def expected_2007(shared_data: Path, arts: dict[str, Layout]) -> dict[str, dict[str, int]]:
    """Gold rows -> every non-title legal span they overlap, by plain interval arithmetic."""
    qrels: dict[str, dict[str, int]] = {}
    for topic, pmid, offset, length in gold_rows(shared_data):
        if pmid not in arts:
            continue
        for i, (start, n) in enumerate(arts[pmid].spans):
            if i > 0 and start < offset + length and offset < start + n:
                qrels.setdefault(topic, {})[f"{pmid}-{i}"] = 1
    return qrels


# --- topics and judgement files ------------------------------------------------------------------


def test_real_2007_topics(shared_data: Path):
    path = shared_data / GOLD_DIR / "2007topics.txt"
    topics = genomics.read_topics(path)
    lines = [line for line in path.read_bytes().decode("cp1252").splitlines() if line.strip()]
    assert len(topics) == len(lines) == 36
    assert list(topics) == [str(i) for i in range(200, 236)]
    assert topics["205"] == (
        "What signs or symptoms of anxiety disorder are related to coronary artery disease?"
    )
    assert topics["200"].startswith("What serum proteins change expression")
    assert not any("[" in text for text in topics.values())


def test_real_2007_gold_standard(shared_data: Path):
    judgements = genomics.read_judgements(shared_data / GOLD_DIR / GOLD)
    lines = (shared_data / GOLD_DIR / GOLD).read_text(encoding="latin-1").splitlines()
    assert len(judgements) == len([line for line in lines if line.strip()]) == 4492
    assert {j.grade for j in judgements} == {1}
    assert judgements[0] == genomics.Judgement("200", "14747618", 64716, 19412, 1)


def test_2006_file_is_graded(source: Path):
    judgements = genomics.read_judgements(source / genomics.JUDGEMENTS["2006"])
    assert [j.grade for j in judgements] == [1, 2, 1, 0, 1, 2, 1, 2, 2]
    topics = genomics.read_topics(source / genomics.TOPICS["2006"])
    assert topics["161"] == "What is the role of IDE in Alzheimer\u2019s disease"
    assert topics["162"] == "What genes are involved in the testimony of Dr. Snow?"


def test_2007_all_judgements_format_is_read_with_its_grades(tmp_path: Path):
    path = tmp_path / "all.tsv"
    path.write_text("200\t14747618\t10\t20\tRELEVANT\n200\t14747618\t40\t20\tNOT_RELEVANT\n")
    assert [j.grade for j in genomics.read_judgements(path)] == [1, 0]


# --- HTML text ----------------------------------------------------------------------------------


def test_text_content_rules():
    text, title = genomics.text_content(
        b"<h2>\r\nA <i>nice</i> title\r\n</h2><h2>second</h2><!-- hidden --><p>caf\xe9 &amp; "
        b"&nbsp;bar\x97baz</p><script><!--\r\nvar u = 1;//--></script>"
    )
    assert title == "\r\nA nice title\r\n"
    assert text == (
        "\r\nA nice title\r\nsecondcaf\u00e9 & \u00a0bar\u0097baz<!--\r\nvar u = 1;//-->"
    )
    assert genomics.text_content(b"<script>unclosed")[0] == "unclosed"
    assert genomics.text_content(b"<SCRIPT>x = '<b>';</SCRIPT>a < b <img alt='c > d'>e")[0] == (
        "x = '<b>';a < b e"
    )
    assert genomics.text_content(b"&#x2013;&lt;&copy;") == ("\u2013<\u00a9", "")
    assert genomics.passage_text("\r\n\r\n John\r\n\r\n\nSnow \r\n") == "John\r\nSnow\r\n"
    assert genomics.passage_text("  ") == "\r\n"


# --- the build from the synthetic collection ----------------------------------------------------


def test_corpus_documents_and_passages(built, arts):
    documents = list(built.corpus)
    expected_ids = [
        "10901322", "10901323", "10901324",  # 10901399 has only its title span
        "11914328", "13130152", "12466207", "14747618",
        "15722549", "15269389", "15722550",
    ]  # fmt: skip
    assert [d.id for d in documents] == expected_ids
    assert sum(len(d.passages) for d in documents) == sum(
        len(arts[pmid].spans) - 1 for pmid in expected_ids
    )
    for document in documents:
        layout = arts[document.id]
        assert document.title == layout.texts[0]
        assert [(p.id, p.position) for p in document.passages] == [
            (f"{document.id}-{i}", i - 1) for i in range(1, len(layout.spans))
        ]
        assert [p.text for p in document.passages] == [normalized(t) for t in layout.texts[1:]]


def test_passages_equal_the_dump(built, shared_data: Path):
    documents = {d.id: d for d in built.corpus}
    dump_docs = dump_corpus(shared_data) + [
        {**r["judged_chunks"][0]["belonging_doc"]} for r in dump_rows(shared_data)
    ]
    for doc in dump_docs:
        chunks = [c for c in doc["chunks"] if not c["id"].endswith("-0")]
        built_doc = documents[doc["id"]]
        assert built_doc.title == doc["title"]
        assert [(p.id, p.text) for p in built_doc.passages] == [
            (c["id"], c["text"]) for c in chunks
        ]
    assert (
        documents["10901322"].title == "\r\nJohn Snow and Modern-Day Environmental Epidemiology\r\n"
    )
    assert documents["10901322"].passages[0].text.startswith("From the Epidemiology Branch")


def test_test_split_only_with_the_expected_qrels(built, expected_2007, shared_data: Path):
    assert set(built.splits) == {"test"}
    test = built.splits["test"]
    dump_160 = {
        j["chunk"]["id"]: j["judgement"] for r in dump_rows(shared_data) for j in r["judged_chunks"]
    }
    assert dump_160 == {"15722549-10": 1, "15269389-14": 2, "15722550-4": 1}
    expected = {"160": dump_160, "162": {"10901323-3": 2}, **expected_2007}
    assert test.qrels == expected
    assert list(test.queries) == ["160", "162", "200", "205", "215"]
    assert {qid: len(j) for qid, j in test.qrels.items()} == {
        "160": 3,
        "162": 1,
        "200": 10,
        "205": 2,
        "215": 4,
    }
    assert test.queries["160"] == "What is the role of PrnP in mad cow disease?"
    assert {g for j in test.qrels.values() for g in j.values()} == {1, 2}
    assert built.relevance_level == 1


def test_gold_passages_crossing_spans_mark_every_span(built, arts):
    qrels = built.splits["test"].qrels["200"]
    start, length = 64716, 19412  # one gold passage of 14747618, cut into two legal spans
    crossed = [
        f"14747618-{i}"
        for i, (s, n) in enumerate(arts["14747618"].spans)
        if s < start + length and start < s + n
    ]
    assert len(crossed) == 2 and all(qrels[pid] == 1 for pid in crossed)


def test_note_counts_dropped_judgements(built, shared_data: Path):
    gold = gold_rows(shared_data)
    outside = sum(1 for _, pmid, _, _ in gold if pmid not in GOLD_PMIDS)
    relevant = len(gold) + 8  # the 2006 file's rows with a grade above 0
    (note,) = built.notes
    assert note == (
        f"of {relevant} relevant judgements, {outside + 1} name PMIDs missing from "
        "legalspans.txt and 1 match only the title span or no legal span (overlap matching); "
        "they were dropped, and with them 34 of 39 topics"
    )


def test_exact_matching_drops_sub_span_judgements(source: Path, arts, shared_data: Path):
    exact = genomics.adapter.build(source, match="exact").splits["test"].qrels
    expected: dict[str, dict[str, int]] = {
        "160": {"15722549-10": 1, "15722550-4": 1},
        "162": {"10901323-3": 1},
    }
    for topic, pmid, offset, length in gold_rows(shared_data):
        if pmid in arts and (offset, length) in arts[pmid].spans[1:]:
            i = arts[pmid].spans.index((offset, length))
            expected.setdefault(topic, {})[f"{pmid}-{i}"] = 1
    assert exact == expected
    assert {qid: len(j) for qid, j in exact.items()} == {
        "160": 2,
        "162": 1,
        "200": 2,
        "205": 1,
        "215": 1,
    }


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_hub_layout_round_trip(built, hub_round_trip, fmt: str):
    assert hub_round_trip(built, fmt).notes == built.notes


def test_raw_files_and_urls():
    urls = {raw.path: raw.url for raw in genomics.adapter.raw_files}
    assert len(urls) == 59 + 1 + 4
    assert (
        urls["jbc-1995.zip"] == "https://dmice.ohsu.edu/trec-gen/data/2006/documents/jbc-1995.zip"
    )
    assert urls["legalspans.txt"].endswith("/2006/documents/legalspans.txt")
    assert urls["2007topics.txt"] == "https://dmice.ohsu.edu/trec-gen/data/2007/2007topics.txt"
    assert genomics.adapter.hub_repo == "UKPLab/dapr"


# --- bad input ----------------------------------------------------------------------------------


@pytest.fixture
def fresh(tmp_path: Path, shared_data: Path) -> Path:
    return write_source(tmp_path / "src", shared_data)


def test_missing_legalspans_names_it(fresh: Path):
    (fresh / "legalspans.txt").unlink()
    with pytest.raises(DataError, match=r"legalspans\.txt: missing raw file of Genomics"):
        genomics.adapter.build(fresh)


def test_legalspans_out_of_archive_order(fresh: Path):
    path = fresh / "legalspans.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[-1], *lines[:-1]]) + "\n")
    dataset = genomics.adapter.build(fresh)
    with pytest.raises(DataError, match=r"legalspans\.txt:1: spans of PMID 15722550 where"):
        list(dataset.corpus)


def test_span_beyond_the_file(fresh: Path):
    path = fresh / "legalspans.txt"
    lines = path.read_text().splitlines()
    lines[1] = "10901322\t1\t99999999"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"legalspans\.txt:2: span 1\+99999999 ends after"):
        list(genomics.adapter.build(fresh).corpus)


def test_pmid_without_html(fresh: Path):
    with (fresh / "legalspans.txt").open("a") as f:
        f.write("99999998\t0\t10\n")
    with pytest.raises(DataError, match="PMID 99999998 has no HTML file"):
        list(genomics.adapter.build(fresh).corpus)


def test_malformed_gold_row_names_file_and_line(fresh: Path):
    path = fresh / genomics.JUDGEMENTS["2007"]
    path.write_text("200\t14747618\t10\t20\tX\n200\t14747618\tabc\t20\tX\n")
    with pytest.raises(DataError, match=r"gold\.standard\.tsv\.txt:2: offset 'abc'"):
        genomics.adapter.build(fresh)


def test_graded_file_row_without_grade(fresh: Path):
    path = fresh / genomics.JUDGEMENTS["2006"]
    path.write_text("160\t15722549\t0\t10\tX\tPOSSIBLY\n160\t15722549\t0\t10\tX\n")
    with pytest.raises(DataError, match=r"relevance\.tsv\.txt:2: the last column must be"):
        genomics.adapter.build(fresh)


def test_judged_topic_without_topic_line(fresh: Path):
    (fresh / genomics.JUDGEMENTS["2006"]).write_text("170\t15722549\t0\t10\tX\tPOSSIBLY\n")
    with pytest.raises(DataError, match=r"topic 170 is judged but not in .*2006topics\.txt"):
        genomics.adapter.build(fresh)


def test_malformed_topic_and_colliding_years(fresh: Path):
    path = fresh / genomics.TOPICS["2006"]
    path.write_text("<160>fine\nno brackets here\n")
    with pytest.raises(DataError, match=r"2006topics\.txt:2: expected <ID>question"):
        genomics.adapter.build(fresh)
    path.write_text("<160>fine\n<161>fine\n<162>fine\n<200>also a 2007 topic\n")
    with pytest.raises(DataError, match=r"2007topics\.txt: topic 200 is also a topic"):
        genomics.adapter.build(fresh)


def test_options_are_checked():
    with pytest.raises(DataError, match="unknown option 'seed'; valid options: match$"):
        genomics.adapter.check_options({"seed": 1})
    with pytest.raises(DataError, match="option 'match' must be one of overlap, exact, got"):
        genomics.adapter.check_options({"match": "fuzzy"})
