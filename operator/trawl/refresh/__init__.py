"""Refresh jobs (spec.refresh): what a page was last time (its state), what counts as a change, and the
decisions a worker makes from them. Pure: the queue stores the state as opaque strings (trawl.queue), the
worker does the I/O (trawl.worker.refresh)."""
