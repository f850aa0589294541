--[[
table-widths.lua: column widths for the PDF, from what the columns hold.

Pandoc sizes the columns of a pipe table wider than 72 characters by the dashes of its
separator line, and the cached tables write `|:---|---:|`: equal widths. In LaTeX every column
then gets the same width, so a long name in a narrow column is hyphenated
("atten-tion_spec-tra") while short numbers get too much room. For LaTeX output only, this
filter sizes each table by its content instead:

- a table whose columns fit side by side at their natural width (widest cell, header included)
  gets natural-width columns, and nothing wraps;
- otherwise every column gets at least its longest word (body cells; header words up to a few
  characters, longer ones may be hyphenated), so numbers, names and hashes are never broken, and
  the room left is shared among the columns whose cells (header included) are longer than
  that, up to a cap.

Widths are estimated from the characters of the table font (tables are set in \small by
_quarto.yml, with 4pt between columns). HTML is left alone: the browser sizes tables from their content.
]]

-- Widths are in digits of the \small table font (5pt). The text block (scrreprt, DIV=11,
-- letter paper) is about 445pt: 89 digits.
local LINE = 89
-- Space between columns (2 \tabcolsep = 8pt), in digits.
local GAP = 1.6
-- Header words longer than this many characters may be hyphenated; shorter ones stay whole.
local HEADER_WORD = 8
-- A column with long cells is not given more room than this.
local CAP = 26
-- Slack per column for the error of the estimate below.
local SLACK = 0.6

-- Approximate width of a string in digits of Latin Modern (digits are half an em).
local function len(s)
  local w = 0
  for _, code in utf8.codes(s) do
    local ch = code < 128 and string.char(code) or ""
    if ch:match("%d") then w = w + 1
    elseif ch:match("%l") then w = w + 0.92
    elseif ch:match("%u") then w = w + 1.4
    elseif ch == " " then w = w + 0.67
    elseif ch:match("[%.,:;!'|]") then w = w + 0.55
    else w = w + 1 end
  end
  return w
end

local function longest_word(s)
  local n = 0
  for word in s:gmatch("%S+") do
    n = math.max(n, len(word))
  end
  return n
end

local function rows(tbl)
  local out = {}
  for _, row in ipairs(tbl.head.rows) do table.insert(out, {row, true}) end
  for _, body in ipairs(tbl.bodies) do
    for _, row in ipairs(body.head) do table.insert(out, {row, true}) end
    for _, row in ipairs(body.body) do table.insert(out, {row, false}) end
  end
  for _, row in ipairs(tbl.foot.rows) do table.insert(out, {row, false}) end
  return out
end

function Table(tbl)
  if not FORMAT:match("latex") then
    return nil
  end
  local n = #tbl.colspecs
  local natural, body, head, floor = {}, {}, {}, {}
  for c = 1, n do natural[c], body[c], head[c], floor[c] = 1, 1, 1, 1 end
  for _, entry in ipairs(rows(tbl)) do
    local row, is_header = entry[1], entry[2]
    local c = 1
    for _, cell in ipairs(row.cells) do
      if cell.col_span == 1 and c <= n then
        local text = pandoc.utils.stringify(cell.contents)
        natural[c] = math.max(natural[c], len(text))
        if is_header then
          head[c] = math.max(head[c], len(text))
          floor[c] = math.max(floor[c], math.min(longest_word(text), HEADER_WORD))
        else
          body[c] = math.max(body[c], len(text))
          floor[c] = math.max(floor[c], longest_word(text))
        end
      end
      c = c + cell.col_span
    end
  end

  local total = 0
  for c = 1, n do total = total + natural[c] + GAP end
  if total <= LINE then
    for c = 1, n do tbl.colspecs[c] = {tbl.colspecs[c][1], pandoc.ColWidthDefault} end
    return tbl
  end

  -- pandoc's widths are fractions of the line less the space between columns
  local avail = LINE - n * GAP
  local width, sum_floor, sum_desire, desire = {}, 0, 0, {}
  for c = 1, n do
    floor[c] = floor[c] + SLACK
    sum_floor = sum_floor + floor[c]
    desire[c] = math.max(0, math.min(math.max(body[c], head[c]), CAP) - floor[c])
    sum_desire = sum_desire + desire[c]
  end
  local extra = math.max(0, avail - sum_floor)
  for c = 1, n do
    local share = sum_desire > 0 and extra * desire[c] / sum_desire or 0
    width[c] = floor[c] + math.min(desire[c], share)
  end
  -- a table whose words alone are wider than the line is scaled to the line (some overflow)
  local scale = math.max(avail, sum_floor)
  for c = 1, n do
    tbl.colspecs[c] = {tbl.colspecs[c][1], width[c] / scale}
  end
  return tbl
end
