--[[
provenance-pages.lua: in the PDF, each cited number links to its row of the provenance appendix, and each
row lists the pages that cite it (see provenance.lua, which marks the numbers).

In every format, first: each minus sign printed as a hyphen becomes a real one (U+2212), in the text and the
tables (cited values and the tables included from the cache print what the code wrote, "-0.49"): a hyphen at
the start of a number or of its exponent ("-0.49", "(s = -0.27)", "2.54e-41"), never one inside a word or
a range ("GPT-2", "10-20"), nor in code or math (TeX and MathML draw their own minus). The rule is
analyses/engine/provenance.py's MINUS, which the provenance appendix and the tooltips use too.

Then at post-quarto (values expanded, HTML-only content gone), for LaTeX only: each `.cited` span becomes
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

local MINUS = "\u{2212}"

-- Whether the byte before position i of s ends a word (a letter, digit, underscore or point; bytes of a
-- multibyte character do not), so that a hyphen after it is no minus sign.
local function in_word(s, i)
  return i > 1 and s:sub(i - 1, i - 1):match("[%w_.]") ~= nil
end

local function real_minus(s)
  if not s:find("-", 1, true) then return nil end
  local out, i = {}, 1
  for k = 1, #s do
    local c = s:sub(k, k)
    local next_digit = s:sub(k + 1, k + 1):match("%d") or s:sub(k + 1, k + 2):match("^%.%d")
    local exponent = k > 2 and s:sub(k - 1, k - 1) == "e" and s:sub(k - 2, k - 2):match("%d")
    if c == "-" and next_digit and (not in_word(s, k) or exponent) then
      table.insert(out, s:sub(i, k - 1) .. MINUS)
      i = k + 1
    end
  end
  if i == 1 then return nil end
  table.insert(out, s:sub(i))
  return table.concat(out)
end

local function real_minus_signs(doc)
  return doc:walk({Str = function(str)
    local text = real_minus(str.text)
    if text then return pandoc.Str(text) end
  end})
end

return {
  Pandoc = function(doc)
    doc = real_minus_signs(doc)
    if quarto.doc.is_format("latex") then
      return link_latex(doc)
    end
    return doc:walk({Span = function(span)
      if span.classes:includes("cited") then return span.content end
    end})
  end,
}
