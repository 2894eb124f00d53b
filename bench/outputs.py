#!/usr/bin/env python3
"""Output formats and WARC capture: what each format costs, how good the main text is, and whether an archive
re-extracts to the crawl's records with no request to the site.

Two corpora: the bookstore fixture (trawl.dev.bookstore, its own process on a loopback port) and real-world
HTML that ships in Debian: the aiohttp documentation (package ``python-aiohttp-doc``, Sphinx pages under
/usr/share/doc/python-aiohttp-doc/html, with navigation sidebar, header bar and footer around the content).

* **Cost per format**: each page's body (fetched once) is extracted with the job's fields plus one format
  (none, markdown, text, structured, links, all), in this process: pages/s and CPU ms per page
  (``time.process_time``). The fetch itself is measured once apart (bookstore, over HTTP).
* **Main-text quality**: the labels are the Sphinx generator's own marking of the main content: the text of
  ``div[role=main]`` of each Debian page (headerlink pilcrows removed), which leaves out the sidebar, the
  related-links bar and the footer. Score: bag-of-words F1 (lower-cased ``\\w+`` tokens) of Trawl's
  ``markdown`` format and of ``trafilatura.extract(..., output_format="markdown")`` called directly with its
  defaults, averaged over the pages.
* **WARC**: a crawl of the bookstore captured into rotating WARC files on a volume directory; every record
  read back with warcio, digests checked; then re-extracted with the same rules, counting requests in the
  site's access log during the re-extraction and comparing the records (all fields but key, job, attempt
  and fetchedAt).

Last line: ``warc_valid=yes|no reextract_requests=N reextract_identical=yes|no markdown_f1=… markdown_f1_direct=…``

    .venv/bin/python bench/outputs.py            # all bookstore products, every Debian page, 3 rounds
    .venv/bin/python bench/outputs.py --quick    # 40 + 15 pages, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborHTMLParser
from warcio.archiveiterator import ArchiveIterator

from trawl.archive.stores import VolumeStore
from trawl.archive.writer import ArchiveLimits, ArchiveWriter
from trawl.dev.bookstore import Bookstore
from trawl.egress.addresses import parse_networks
from trawl.worker.archiving import AsyncArchive, capture_of
from trawl.worker.extract import ExtractOptions, Extractor, FieldSpec
from trawl.worker.fetch import Fetcher
from trawl.worker.formats import FormatOptions
from trawl.worker.reextract import ReextractCounts, extractor_call, reextract

DEBIAN_DOCS = Path("/usr/share/doc/python-aiohttp-doc/html")
SKIP_PAGES = {"genindex.html", "search.html", "py-modindex.html"}  # generated lists: no main text to label
LOOPBACK = parse_networks(["127.0.0.0/8"])
FIELDS = (FieldSpec("name", "h1"), FieldSpec("price", ".price"))
FORMAT_SETS: dict[str, tuple[str, ...]] = {
    "none": (),
    "markdown": ("markdown",),
    "text": ("text",),
    "structured": ("structured",),
    "links": ("links",),
    "all": ("markdown", "text", "structured", "links"),
}
VOLATILE = ("key", "job", "attempt", "fetchedAt")


@dataclass(frozen=True)
class Doc:
    url: str
    body: bytes
    content_type: str


def rules(formats: Sequence[str]) -> ExtractOptions:
    return ExtractOptions(fields=FIELDS, formats=FormatOptions(formats=tuple(formats)))


async def fetch_all(urls: Sequence[str]) -> tuple[list[Doc], float]:
    docs: list[Doc] = []
    started = time.perf_counter()
    async with Fetcher(allowed=LOOPBACK) as fetcher:
        for url in urls:
            r = await fetcher.fetch(url)
            docs.append(Doc(url, r.body, r.content_type + (f"; charset={r.charset}" if r.charset else "")))
    return docs, time.perf_counter() - started


def debian_docs(limit: int | None) -> list[Doc]:
    pages = sorted(p for p in DEBIAN_DOCS.glob("*.html") if p.name not in SKIP_PAGES)
    return [
        Doc(f"https://docs.aiohttp.org/en/stable/{p.name}", p.read_bytes(), "text/html; charset=utf-8")
        for p in pages[:limit]
    ]


def cost(docs: Sequence[Doc], formats: Sequence[str], rounds: int) -> tuple[float, float]:
    """(pages/s, CPU ms per page) of extraction with ``formats``."""
    extractor = Extractor(rules(formats))
    extractor.extract(docs[0].body, docs[0].url, content_type=docs[0].content_type)  # imports, caches: not timed
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for d in docs:
            extractor.extract(d.body, d.url, content_type=d.content_type)
    n = len(docs) * rounds
    return n / (time.perf_counter() - wall0), 1000 * (time.process_time() - cpu0) / n


def tokens(text: str) -> Counter[str]:
    return Counter(re.findall(r"\w+", text.lower()))


def f1(got: str, want: str) -> float:
    g, w = tokens(got), tokens(want)
    common = sum((g & w).values())
    if not common:
        return 0.0
    p, r = common / sum(g.values()), common / sum(w.values())
    return 2 * p * r / (p + r)


def label(html: bytes) -> str:
    """The page's main text as its generator marked it: ``div[role=main]`` without the pilcrow anchors."""
    tree = LexborHTMLParser(html)
    for node in tree.css("a.headerlink, script, style"):
        node.decompose()
    main = tree.css_first('[role="main"]')
    return main.text(separator=" ") if main is not None else ""


def quality(docs: Sequence[Doc]) -> tuple[float, float]:
    """(Trawl's markdown F1, trafilatura-direct F1) averaged over ``docs``."""
    import trafilatura

    extractor = Extractor(rules(("markdown",)))
    ours: list[float] = []
    direct: list[float] = []
    for d in docs:
        want = label(d.body)
        page = extractor.extract(d.body, d.url, content_type=d.content_type)
        ours.append(f1(str(page.data.get("markdown") or ""), want))
        plain = trafilatura.extract(d.body.decode("utf-8", "replace"), url=d.url, output_format="markdown")
        direct.append(f1(plain or "", want))
    return sum(ours) / len(ours), sum(direct) / len(direct)


def stable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in VOLATILE}


async def warc_round(site: Bookstore, urls: Sequence[str], workdir: Path) -> tuple[bool, int, bool, dict[str, Any]]:
    """Crawl with capture, validate with warcio, re-extract: (valid, requests during re-extraction, identical,
    the writer's counts)."""
    store = VolumeStore(workdir / "archive")
    writer = ArchiveWriter(store, workdir / "spool", writer_id="bench", limits=ArchiveLimits(max_file_bytes=64 * 1024))
    archive = AsyncArchive(writer)
    extractor = Extractor(rules(("markdown", "links")))
    crawled: list[dict[str, Any]] = []
    async with Fetcher(allowed=LOOPBACK) as fetcher:
        for url in urls:
            r = await fetcher.fetch(url)
            await archive.capture(capture_of(url, r, depth=0))
            page = extractor.extract(r.body, url, content_type=r.content_type)
            crawled.append({"url": url, "finalUrl": r.final_url, "status": r.status, "depth": 0, **page.data})
    await archive.close()
    valid, responses = True, 0
    try:
        for name in store.names():
            with store.open_warc(name) as fh:
                for record in ArchiveIterator(fh, check_digests="raise"):
                    record.content_stream().read()
                    responses += record.rec_type == "response"
    except Exception:
        valid = False
    valid = valid and responses == len(urls)
    before = len(site.entries())
    counts = ReextractCounts()
    again = [stable(r.data) for r in reextract(store, "reextract", extractor_call(extractor), counts)]
    requests = len(site.entries()) - before
    key = lambda d: str(d["url"])  # noqa: E731
    identical = sorted(again, key=key) == sorted(crawled, key=key)
    info = {"files": writer.counts.files, "records": writer.counts.records, "bytes": writer.counts.bytes}
    return valid, requests, identical, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds = 1 if args.quick else 3
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="trawl-bench-outputs-") as tmp, Bookstore() as site:
        products = [p.path for p in site.catalog.products]
        urls = [site.url + p for p in products[: 40 if args.quick else None]]
        shop, fetch_seconds = asyncio.run(fetch_all(urls))
        debian = debian_docs(15 if args.quick else None)
        print(f"fetch only (bookstore, sequential): {len(shop) / fetch_seconds:.0f} pages/s")
        print(f"{'corpus':<10} {'formats':<11} {'pages/s':>9} {'CPU ms/page':>12}")
        for corpus, docs in (("bookstore", shop), ("debian", debian)):
            for name, formats in FORMAT_SETS.items():
                rate, cpu = cost(docs, formats, rounds)
                print(f"{corpus:<10} {name:<11} {rate:>9.1f} {cpu:>12.2f}")
        ours, direct = quality(debian)
        print(
            f"main text F1 on {len(debian)} Debian pages (labels: Sphinx div[role=main]): "
            f"trawl={ours:.3f} direct={direct:.3f}"
        )
        valid, requests, identical, info = asyncio.run(warc_round(site, urls, Path(tmp)))
        print(f"warc: {info}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    print(
        f"warc_valid={yes(valid)} reextract_requests={requests} reextract_identical={yes(identical)} "
        f"markdown_f1={ours:.3f} markdown_f1_direct={direct:.3f}"
    )


if __name__ == "__main__":
    main()
