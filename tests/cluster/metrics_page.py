"""One Prometheus /metrics page, parsed with prometheus_client's parser: what the cluster tests read
from the operator's and the workers' endpoints."""

from __future__ import annotations

import urllib.request
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One /metrics page: samples by name, each a list of (labels, value)."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in self.families.values():
            for s in family.samples:
                self.samples[s.name].append((dict(s.labels), s.value))

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        assert name in self.samples, f"{name} not exported; have {sorted(self.samples)}"
        return sum(v for lab, v in self.samples[name] if all(lab.get(k) == x for k, x in labels.items()))

    def labels(self, name: str, label: str) -> set[str]:
        return {lab.get(label, "") for lab, _ in self.samples.get(name, [])}


def scrape_url(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return Scrape(resp.read().decode())
