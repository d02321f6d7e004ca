"""The report of a tuned artifact: one source (report.json + manifest) rendered to tables, Markdown and HTML
(:mod:`.render`), with the partition picture (:mod:`.svg`)."""
