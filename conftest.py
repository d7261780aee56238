"""Load the parity pytest plugin (also when the project is used from a checkout without installing)."""

pytest_plugins = ["parity.pytest_plugin"]
