"""The report of a tuned artifact: one document model rendered to Markdown, HTML and JSON (:mod:`.render`),
its pictures (:mod:`.svg`), what a tune measured (:mod:`.coverage`), and the model annotated with what runs
where (:mod:`.annotate`)."""
