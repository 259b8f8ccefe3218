"""Tools from Model Context Protocol servers (SPEC F12).

``config`` parses the ``[mcp_servers.NAME]`` tables, ``manager`` starts the
servers a chat needs (once per process) and turns their tools into foliko
``Tool`` objects. Only ``connection`` and ``transport`` import the ``mcp``
package, and only when a configured server is used.
"""
