"""What the doors use of the layers under the service, besides turns: templates,
tools from code, other tools' formats, model lists, MCP server settings and the
questions MCP servers ask.

The CLI, ``foliko serve`` and the MCP server speak to the service only
(``tests/test_layers.py`` holds them to it); this module is where the service
names what it offers of the layers below, so a door never imports them. Each
name loads its module on first use (PEP 562): importing this costs nothing.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import foliko_cli.formats.exporters as _exporters
    import foliko_cli.formats.importers as _importers
    import foliko_cli.formats.importers.reading as _reading
    import foliko_cli.formats.templates as _templates
    import foliko_cli.formats.transcript as _transcript
    import foliko_cli.mcp.forms as _forms
    import foliko_cli.mcp.oauth.login as _login
    import foliko_cli.mcp.resources as _resources
    from foliko_cli.engine.agents import agent_config as agent_config
    from foliko_cli.engine.plugins import function_tools as function_tools
    from foliko_cli.engine.plugins import is_code as is_code
    from foliko_cli.engine.plugins import load_tool as load_tool
    from foliko_cli.engine.tools import BUILTIN_TOOLS as BUILTIN_TOOLS
    from foliko_cli.engine.tools import Tool as Tool
    from foliko_cli.engine.tools import no_code as no_code
    from foliko_cli.formats.exporters import writer as writer
    from foliko_cli.formats.importers.base import LEFT_OUT_BRANCH as LEFT_OUT_BRANCH
    from foliko_cli.formats.importers.base import LEFT_OUT_FORK as LEFT_OUT_FORK
    from foliko_cli.formats.importers.base import Imported as Imported
    from foliko_cli.formats.templates import Template as Template
    from foliko_cli.formats.templates import load_template as load_template
    from foliko_cli.formats.templates import save_template as save_template
    from foliko_cli.formats.templates import template_path as template_path
    from foliko_cli.formats.templates import templates_dir as templates_dir
    from foliko_cli.formats.transcript import view_begins as view_begins
    from foliko_cli.mcp.asking import Answer as Answer
    from foliko_cli.mcp.asking import Decision as Decision  # a type only, there too
    from foliko_cli.mcp.asking import Elicitation as Elicitation
    from foliko_cli.mcp.asking import Progress as Progress
    from foliko_cli.mcp.asking import ToolCall as ToolCall
    from foliko_cli.mcp.forms import Field as Field
    from foliko_cli.mcp.server_config import ServerConfig as ServerConfig
    from foliko_cli.mcp.server_config import server_config as server_config
    from foliko_cli.models import model_spec as model_spec
    from foliko_cli.models.base import TOKENS_LIMIT as TOKENS_LIMIT
    from foliko_cli.models.base import check_options as check_options
    from foliko_cli.models.listing import model_rows as model_rows
    from foliko_cli.models.listing import served_models as served_models
    from foliko_cli.storage import init_place as init_place
    from foliko_cli.storage import open_storage as open_storage
    from foliko_cli.storage.base import ProblemKind as ProblemKind

    # what the service calls by another name
    EXPORT_FORMATS = _exporters.FORMATS
    IMPORT_FORMATS = _importers.FORMATS
    check_template_name = _templates.check_name
    form_fields = _forms.fields
    markdown_transcript = _transcript.markdown
    mcp_login = _login.login
    mcp_logout = _login.logout
    parse_resource = _resources.parse
    read_import = _reading.read
    saved_templates = _templates.saved_names


# name here: (module, name there)
_LAZY = {
    "agent_config": ("foliko_cli.engine.agents", "agent_config"),
    "function_tools": ("foliko_cli.engine.plugins", "function_tools"),
    "is_code": ("foliko_cli.engine.plugins", "is_code"),
    "load_tool": ("foliko_cli.engine.plugins", "load_tool"),
    "BUILTIN_TOOLS": ("foliko_cli.engine.tools", "BUILTIN_TOOLS"),
    "Tool": ("foliko_cli.engine.tools", "Tool"),
    "no_code": ("foliko_cli.engine.tools", "no_code"),
    "EXPORT_FORMATS": ("foliko_cli.formats.exporters", "FORMATS"),
    "writer": ("foliko_cli.formats.exporters", "writer"),
    "IMPORT_FORMATS": ("foliko_cli.formats.importers", "FORMATS"),
    "LEFT_OUT_BRANCH": ("foliko_cli.formats.importers.base", "LEFT_OUT_BRANCH"),
    "LEFT_OUT_FORK": ("foliko_cli.formats.importers.base", "LEFT_OUT_FORK"),
    "Imported": ("foliko_cli.formats.importers.base", "Imported"),
    "read_import": ("foliko_cli.formats.importers.reading", "read"),
    "Template": ("foliko_cli.formats.templates", "Template"),
    "check_template_name": ("foliko_cli.formats.templates", "check_name"),
    "load_template": ("foliko_cli.formats.templates", "load_template"),
    "save_template": ("foliko_cli.formats.templates", "save_template"),
    "saved_templates": ("foliko_cli.formats.templates", "saved_names"),
    "template_path": ("foliko_cli.formats.templates", "template_path"),
    "templates_dir": ("foliko_cli.formats.templates", "templates_dir"),
    "markdown_transcript": ("foliko_cli.formats.transcript", "markdown"),
    "view_begins": ("foliko_cli.formats.transcript", "view_begins"),
    "Answer": ("foliko_cli.mcp.asking", "Answer"),
    "Elicitation": ("foliko_cli.mcp.asking", "Elicitation"),
    "Progress": ("foliko_cli.mcp.asking", "Progress"),
    "ToolCall": ("foliko_cli.mcp.asking", "ToolCall"),
    "Field": ("foliko_cli.mcp.forms", "Field"),
    "form_fields": ("foliko_cli.mcp.forms", "fields"),
    "mcp_login": ("foliko_cli.mcp.oauth.login", "login"),
    "mcp_logout": ("foliko_cli.mcp.oauth.login", "logout"),
    "parse_resource": ("foliko_cli.mcp.resources", "parse"),
    "ServerConfig": ("foliko_cli.mcp.server_config", "ServerConfig"),
    "server_config": ("foliko_cli.mcp.server_config", "server_config"),
    "model_spec": ("foliko_cli.models", "model_spec"),
    "check_options": ("foliko_cli.models.base", "check_options"),
    "TOKENS_LIMIT": ("foliko_cli.models.base", "TOKENS_LIMIT"),
    "model_rows": ("foliko_cli.models.listing", "model_rows"),
    "served_models": ("foliko_cli.models.listing", "served_models"),
    "init_place": ("foliko_cli.storage", "init_place"),
    "open_storage": ("foliko_cli.storage", "open_storage"),
    "ProblemKind": ("foliko_cli.storage.base", "ProblemKind"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, there = _LAZY[name]
    value = getattr(importlib.import_module(module), there)
    globals()[name] = value  # found once, then an ordinary attribute
    return value
