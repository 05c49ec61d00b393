"""The project as a whole: the public API, lint, types, layout, imports, docs, packaging,
examples, benchmarks."""
