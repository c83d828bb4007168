"""Message templates, one module per notice type; per-cause wording in :mod:`.causes`.

Templates are Python (``string.Template`` texts and small render functions): Jinja2 is not
a dependency, and Python modules ship in the wheel with no package-data entry. Each render
function takes plain data and returns the channel's payload: ``{"text", "html"}`` for email,
``{"text", "blocks"}`` (Block Kit) for Slack.
"""
