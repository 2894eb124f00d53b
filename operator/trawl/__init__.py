"""Trawl: a Kubernetes-native operator that runs web-scraping work at scale."""

__version__ = "0.1.0"
