"""Tool functions the feature tests load as ``plugin_pkg.tools:NAME`` (config tools)
or through a ``foliko.tools`` entry point written by the tests."""
