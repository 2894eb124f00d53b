"""CronScrapeJob: the reconcile pass and its schedule (the CronJob contract, pure)."""
