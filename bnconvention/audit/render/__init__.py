"""Rendering: the Markdown of an audit and a census, the plots, and one audit's output folder."""

from bnconvention.audit.render.census import census_sections_markdown
from bnconvention.audit.render.families import families_markdown
from bnconvention.audit.render.markdown import census_markdown
from bnconvention.audit.render.outputs import annotation_text, write_audit_outputs

__all__ = ["annotation_text", "census_markdown", "census_sections_markdown", "families_markdown", "write_audit_outputs"]
