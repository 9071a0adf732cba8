"""Console views (HTMX), one module per area. Thin: reads through the use cases' ``queries``
modules, writes through the use cases (``scheduler.jobs``, ``scheduler.budgets``, ...); each
page renders one template whose partials are the fragments HTMX asks for."""
