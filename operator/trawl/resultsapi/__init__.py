"""The results API: a job's records, dead letters and retries over HTTPS, authorised by Kubernetes.

Served by the operator process (``trawl operator --api-port``) in every replica, leader or standby. A
caller presents their own Kubernetes bearer token (the API server says who it is: TokenReview), or comes
through the API server as an aggregated API (``/apis/results.trawl.dev/…``: the front proxy's verified
certificate names the user); either way RBAC decides per request (SubjectAccessReview on
``scrapejobs/results`` or ``scrapejobs/deadletters``). Redis is reached with the pool's settings, as the
operator reaches it: no Redis password leaves the platform's namespace.

``access`` holds the pure decisions (what a request needs, cursors, caches, rate limits); ``kubeauth``
asks the API server; ``store`` reads Redis and the objects; ``server`` is the aiohttp application.
"""
