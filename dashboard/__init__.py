"""Browser dashboard for ops and customers: units, timelines, inventory and packages."""
