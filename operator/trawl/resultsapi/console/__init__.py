"""The web console: server-rendered pages of pools, jobs, dead letters, results and CronScrapeJobs, served by
the results API's process (``trawl operator --api-port … --console``), live over server-sent events.

The viewer is a Kubernetes identity (a bearer token from an OIDC proxy's Authorization header, or one pasted
into the login form and kept in an HttpOnly cookie); every page and every live event shows only what a
SubjectAccessReview lets that identity see, as the API decides. ``session`` holds the pure rules (cookie,
CSRF, headers), ``pages`` the pure HTML, ``hub`` the one shared feed of objects, ``routes`` the handlers.
"""
