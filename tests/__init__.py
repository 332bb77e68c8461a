"""Test package (a regular package: verl 0.7.0 wheel installs a top-level `tests` package that would shadow a namespace one)."""
