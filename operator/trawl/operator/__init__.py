"""The kopf operator: thin handlers over pure reconcile logic."""
