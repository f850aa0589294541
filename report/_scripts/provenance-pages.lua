--[[
provenance-pages.lua: in the PDF, each cited number links to its row of the provenance appendix, and each
row lists the pages that cite it (see provenance.lua, which marks the numbers).

Run at post-quarto (values expanded, HTML-only content gone), for LaTeX only: each `.cited` span becomes
`\citedlink{ROW}{value}` (a discreet link to its first key's row, defined in _quarto.yml; a plain value
where it holds a displayed formula), followed by an invisible `\label{cited-N}`; in the appendix's listing
(raw LaTeX that analyses/engine/provenance.py writes), each `\citedpagesof{KEY}` becomes
`\citedpages{cited-3,cited-17}` (defined in _quarto.yml), the pages of the labels of its key, or a dash
when no printed text cites it. Other formats only lose the spans.
]]

-- The row's anchor, as analyses/engine/provenance.py's key_anchor writes it.
local function key_anchor(key)
  return "key-" .. (key:gsub("%.", "--"):gsub("_", "-"))
end

local function displayed(inlines)
  local found = false
  pandoc.Inlines(inlines):walk({Math = function(m) found = found or m.mathtype == "DisplayMath" end})
  return found
end

local function link_latex(doc)
  local labels, count = {}, 0
  doc = doc:walk({Span = function(span)
    if not span.classes:includes("cited") then return nil end
    count = count + 1
    local label = "cited-" .. count
    local keys = {}
    for key in span.attributes["data-key"]:gmatch("%S+") do
      table.insert(keys, key)
      labels[key] = labels[key] or {}
      table.insert(labels[key], label)
    end
    local out = pandoc.Inlines({})
    if displayed(span.content) then
      out:extend(span.content)
    else
      out:insert(pandoc.RawInline("latex", "\\protect\\citedlink{" .. key_anchor(keys[1]) .. "}{"))
      out:extend(span.content)
      out:insert(pandoc.RawInline("latex", "}"))
    end
    out:insert(pandoc.RawInline("latex", "\\label{" .. label .. "}"))
    return out
  end})
  local function pages(key)
    local found = labels[key]
    return found and ("\\citedpages{" .. table.concat(found, ",") .. "}") or "---"
  end
  return doc:walk({RawBlock = function(raw)
    if raw.format ~= "latex" or not raw.text:find("\\citedpagesof", 1, true) then return nil end
    raw.text = raw.text:gsub("\\citedpagesof{([^}]*)}", pages)
    return raw
  end})
end

return {
  Pandoc = function(doc)
    if quarto.doc.is_format("latex") then
      return link_latex(doc)
    end
    return doc:walk({Span = function(span)
      if span.classes:includes("cited") then return span.content end
    end})
  end,
}
