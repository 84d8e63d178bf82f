//! Rendering check and diff results: console text, Markdown, JUnit XML, shields.io badge.
