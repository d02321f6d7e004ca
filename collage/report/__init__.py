"""The report of a tuned artifact: tables and their Markdown / HTML rendering (:mod:`.render`) and the
partition picture (:mod:`.svg`)."""
