"""Console views (HTMX), one module per area. Thin: reads through ``scheduler.queries``,
writes through ``scheduler.services``; each page renders one template whose partials are the
fragments HTMX asks for."""
