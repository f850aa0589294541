--[[
provenance-pages.lua: in the PDF, the pages that cite each number (see provenance.lua, which marks them).

Run at post-quarto (values expanded, HTML-only content gone), for LaTeX only: each `.cited` span keeps
its plain value, followed by an invisible `\label{cited-N}`; each `.cited-pages` placeholder of the
provenance appendix becomes `\citedpages{cited-3,cited-17}` (defined in _quarto.yml), the pages of the
labels of its key, or a dash when no printed text cites it. Other formats only lose the spans.
]]

local function link_latex(doc)
  local labels, count = {}, 0
  doc = doc:walk({Span = function(span)
    if not span.classes:includes("cited") then return nil end
    count = count + 1
    local label = "cited-" .. count
    for key in span.attributes["data-key"]:gmatch("%S+") do
      labels[key] = labels[key] or {}
      table.insert(labels[key], label)
    end
    local out = pandoc.Inlines(span.content)
    out:insert(pandoc.RawInline("latex", "\\label{" .. label .. "}"))
    return out
  end})
  return doc:walk({Span = function(span)
    if not span.classes:includes("cited-pages") then return nil end
    local found = labels[span.attributes["data-key"]]
    if found == nil then return pandoc.Str("—") end
    return pandoc.RawInline("latex", "\\citedpages{" .. table.concat(found, ",") .. "}")
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
