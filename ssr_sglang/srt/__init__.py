"""SGLang glue: plugin registration, the SSR speculative worker, in-scheduler draft branches, metrics."""
