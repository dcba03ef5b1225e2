"""memplan's hooks into training libraries: memplan.integrations.transformers.MemplanCallback."""
