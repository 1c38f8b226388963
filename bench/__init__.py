"""Benchmarks that print figures: ``python bench/<name>.py --help`` says what each measures."""
