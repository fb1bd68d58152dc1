"""Package catalog: the fixed GPU + CPU + memory products the SaaS sells."""
