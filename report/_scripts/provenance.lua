--[[
provenance.lua: every cited number knows where it came from (see analyses/engine/provenance.py).

Run at pre-ast, before Quarto expands shortcodes. On the web, each `{{< var KEY >}}` becomes a quiet
link to its key's row of the provenance listing (report/provenance-listing.html), whose tooltip (title) gives the
printed digits and their accuracy in words ("0.79: the computation fixes it to within 0.005"); a formula
that cites keys becomes such a link as a whole (MathML holds no links); and every figure whose images come
from the cache ends its caption with links to the entries of the analyses that drew it. In other formats
each citation is only wrapped in a `.cited` span with its `data-key`, for provenance-pages.lua: the PDF's
numbers stay plain text. In every format, the one-line note of an analysis that was not computed
(its status.md, which names the model and the tensors it lacks by their identifiers) is replaced by the
same note in words ("not computed for GPT-2: this edition's checkpoint has no MLP weights").

The anchors, tooltips and notes come from report/provenance.json, which `python -m analyses provenance`
writes from the cache (the pre-render step runs it): nothing here is typed by hand.
]]

local VAR = "{{<%s*var%s+([%w%._%-]+)%s*>}}"

local function load_data()
  local path = pandoc.path.join({quarto.project.directory, "report", "provenance.json"})
  local file = io.open(path, "r")
  if not file then
    quarto.log.warning("provenance.lua: no " .. path .. " (run `python -m analyses provenance`)")
    return {keys = {}, figures = {}, notes = {}}
  end
  local text = file:read("a")
  file:close()
  return quarto.json.decode(text)
end

local data = nil
local function provenance()
  data = data or load_data()
  return data
end

-- The provenance listing (plain HTML beside the appendix, written by `python -m analyses provenance`), relative
-- to the page being rendered (the book's root index or a chapter).
local function page_href(anchor)
  local target = pandoc.path.join({quarto.project.directory, "report", "provenance-listing.html"})
  local here = pandoc.path.directory(quarto.doc.input_file)
  return pandoc.path.make_relative(target, here, true) .. "#" .. anchor
end

local function shortcode_params(span)
  local out = {}
  for _, el in ipairs(span.content) do
    if el.t == "Span" and el.classes:includes("quarto-shortcode__-param") then
      table.insert(out, el.attributes["data-value"])
    end
  end
  return out
end

-- A cited value (or formula): on the web a quiet link to its key's row, with the printed digits and
-- their accuracy in words as its tooltip; elsewhere a `.cited` span (provenance-pages.lua).
local function cited_span(content, keys)
  local attr = pandoc.Attr("", {"cited"}, {{"data-key", table.concat(keys, " ")}})
  if not quarto.doc.is_format("html") then
    return pandoc.Span(content, attr)
  end
  local titles = {}
  for _, key in ipairs(keys) do
    local entry = provenance().keys[key]
    if entry == nil then
      quarto.log.warning("provenance.lua: the cited key " .. key .. " has no provenance entry")
      return nil
    end
    table.insert(titles, entry.title)
  end
  return pandoc.Link(content, page_href(provenance().keys[keys[1]].anchor), table.concat(titles, "\n"), attr)
end

-- Figures: the cache entries whose images a figure (or a figure div, with its panels) shows.
local function entries_shown(el)
  local found, seen = {}, {}
  el:walk({Image = function(img)
    local scope, name = img.src:match("_cache/([%w_-]+)/([%w_-]+)/")
    if scope and not seen[scope .. "/" .. name] then
      seen[scope .. "/" .. name] = true
      table.insert(found, scope .. "/" .. name)
    end
  end})
  return found
end

-- A caption's quiet link to the entries that drew the figure: "provenance", or with several entries one link
-- per model, named in words ("GPT-2 · MiniLM"; numbered where a model drew two); their tooltips say which
-- analysis drew it.
local function caption_links(labels)
  local names, seen = {}, {}
  for _, label in ipairs(labels) do
    local figure = provenance().figures[label]
    if figure == nil then
      quarto.log.warning("provenance.lua: no provenance entry for the figure of " .. label)
      return nil
    end
    names[figure.name] = (names[figure.name] or 0) + 1
  end
  local inlines = pandoc.Inlines({})
  if #labels > 1 then inlines:insert(pandoc.Str("provenance:")) end
  for i, label in ipairs(labels) do
    local figure = provenance().figures[label]
    seen[figure.name] = (seen[figure.name] or 0) + 1
    local text = #labels == 1 and "provenance" or
      (names[figure.name] == 1 and figure.name or (figure.name .. " " .. seen[figure.name]))
    if i > 1 then inlines:extend({pandoc.Space(), pandoc.Str("·")}) end
    if #inlines > 0 then inlines:insert(pandoc.Space()) end
    inlines:insert(pandoc.Link(pandoc.Inlines({pandoc.Str(text)}), page_href(figure.anchor), figure.title))
  end
  return pandoc.Span(inlines, pandoc.Attr("", {"provenance-link"}))
end

local function append_to(blocks, span)
  local last = blocks[#blocks]
  if last and (last.t == "Para" or last.t == "Plain") then
    last.content:insert(pandoc.Space())
    last.content:insert(span)
    return true
  end
  return false
end

local mark = {
  {
    Span = function(el)
      if el.classes:includes("quarto-shortcode__") then
        local params = shortcode_params(el)
        if params[1] == "var" and params[2] then
          return cited_span({el}, {params[2]})
        end
      end
    end,
    Math = function(el)
      local keys = {}
      for key in el.text:gmatch(VAR) do table.insert(keys, key) end
      if #keys > 0 then
        return cited_span({el}, keys)
      end
    end,
  },
  {
    traverse = "topdown",
    Figure = function(fig)
      if not quarto.doc.is_format("html") then return nil end
      local labels = entries_shown(fig)
      local span = #labels > 0 and caption_links(labels)
      if span then append_to(fig.caption.long, span) end
      return fig, false
    end,
    Div = function(div)
      if not (quarto.doc.is_format("html") and div.identifier:match("^fig%-")) then return nil end
      local labels = entries_shown(div)
      local span = #labels > 0 and caption_links(labels)
      if span then append_to(div.content, span) end
      return div, false  -- the panels keep their short captions
    end,
  },
}

return mark
