"""The outer loops as plain functions over files; the CLI, Dagster and DVC all call these."""
