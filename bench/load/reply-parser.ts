// An incremental RESP reply parser for the load client. It keeps no reply values, only what the
// harness counts: whether a top-level reply was an error (and its text), a null, or how many nulls an
// array held (MGET misses). Chunks are consumed in place, across any split; bulk bodies are skipped
// by arithmetic, never copied. RESP2, and RESP3's types for good measure.
//
//   let at = 0;
//   while ((at = parser.next(chunk, at)) !== -1) use(parser.status, parser.nulls, parser.errorText());
//
// States:  TYPE ─┬─ '+' '-' ':' '_' ',' '#' '(' ─→ LINE (to LF) ─→ element done
//                ├─ '$' '=' '!' ─→ LINE (length) ─→ BODY (skip length + CRLF) ─→ element done
//                └─ '*' '~' '>' '%' '|' ─→ LINE (count) ─→ push count on the stack (or done if ≤ 0)
// An element done pops finished arrays off the stack; the reply is complete when the stack is empty.

export const REPLY_OK = 0;
export const REPLY_NULL = 1;
export const REPLY_ERROR = 2;

/** Deepest array nesting accepted (replies to the commands the harness sends nest at most once). */
export const REPLY_DEPTH_MAX = 16;
/** Bytes of an error line kept for the report (the rest is skipped). */
export const REPLY_ERROR_TEXT_BYTES_MAX = 200;
/** Bytes of a bulk string or aggregate count a reply may announce (Redis's proto-max-bulk-len). */
const REPLY_LENGTH_MAX = 512 * 1024 * 1024;

const S_TYPE = 0;
const S_LINE = 1;
const S_BODY = 2;

const H_SKIP = 0; // the line's text is ignored
const H_ERROR = 1; // the line's text is an error message
const H_BULK = 2; // the line is a bulk length
const H_AGGREGATE = 3; // the line is an element count
const H_NULL = 4; // RESP3 '_'

const LF = 0x0a;
const CR = 0x0d;

export class ReplyProtocolError extends Error {
  override name = 'ReplyProtocolError';
}

export class ReplyParser {
  /** Of the last complete reply: REPLY_OK, REPLY_NULL (a null at top level) or REPLY_ERROR. */
  status = REPLY_OK;
  /** Of the last complete reply: null elements inside its arrays (MGET's missing keys). */
  nulls = 0;

  private state = S_TYPE;
  private header = H_SKIP;
  /** The type byte of the element being read, for aggregates ('%' and '|' count pairs). */
  private typeByte = 0;
  private number = 0;
  private negative = false;
  private digits = 0;
  /** Bytes of the bulk body still to skip, its CRLF included. */
  private bodyLeft = 0;
  /** Elements left in each open aggregate, outermost first. */
  private readonly left = new Float64Array(REPLY_DEPTH_MAX);
  private depth = 0;
  private readonly errorBytes = Buffer.alloc(REPLY_ERROR_TEXT_BYTES_MAX);
  private errorLength = 0;

  /** The text of the last error reply (allocates: errors are the rare path). */
  errorText(): string {
    return this.errorBytes.toString('latin1', 0, this.errorLength);
  }

  /**
   * Consumes `chunk` from `at` up to the end of the next complete reply and returns the index after
   * it, or -1 when the chunk ended first (the partial reply is remembered). Throws ReplyProtocolError
   * on bytes that are not RESP.
   */
  next(chunk: Buffer, at: number): number {
    let i = at;
    const end = chunk.length;
    while (i < end) {
      switch (this.state) {
        case S_TYPE:
          this.startElement(chunk[i++]);
          break;
        case S_LINE: {
          const b = chunk[i++];
          if (b === LF) {
            if (this.endLine()) return i;
          } else if (b !== CR) this.lineByte(b);
          break;
        }
        case S_BODY: {
          const take = Math.min(this.bodyLeft, end - i);
          i += take;
          this.bodyLeft -= take;
          if (this.bodyLeft === 0 && this.elementDone()) return i;
          break;
        }
      }
    }
    return -1;
  }

  private startElement(type: number): void {
    if (this.depth === 0) {
      this.status = REPLY_OK;
      this.nulls = 0;
      this.errorLength = 0;
    }
    this.typeByte = type;
    this.number = 0;
    this.negative = false;
    this.digits = 0;
    this.state = S_LINE;
    switch (type) {
      case 0x2b: // + simple string
      case 0x3a: // : integer
      case 0x2c: // , double
      case 0x23: // # boolean
      case 0x28: // ( big number
        this.header = H_SKIP;
        return;
      case 0x2d: // - error
        this.header = H_ERROR;
        this.status = REPLY_ERROR;
        return;
      case 0x5f: // _ null
        this.header = H_NULL;
        return;
      case 0x24: // $ bulk string
      case 0x3d: // = verbatim string
      case 0x21: // ! bulk error
        this.header = H_BULK;
        if (type === 0x21) this.status = REPLY_ERROR; // its text (the body) is skipped
        return;
      case 0x2a: // * array
      case 0x7e: // ~ set
      case 0x3e: // > push
      case 0x25: // % map
      case 0x7c: // | attribute
        this.header = H_AGGREGATE;
        return;
      default:
        throw new ReplyProtocolError(`a reply starts with byte 0x${type.toString(16)}, not a RESP type`);
    }
  }

  private lineByte(b: number): void {
    if (this.header === H_ERROR) {
      if (this.errorLength < this.errorBytes.length) this.errorBytes[this.errorLength++] = b;
    } else if (this.header === H_BULK || this.header === H_AGGREGATE) {
      if (b === 0x2d && this.digits === 0 && !this.negative) this.negative = true;
      else if (b >= 0x30 && b <= 0x39 && this.digits < 12) {
        this.number = this.number * 10 + (b - 0x30);
        this.digits++;
      } else throw new ReplyProtocolError(`a length holds the byte 0x${b.toString(16)}`);
    }
  }

  /** The header line ended. True when the whole top-level reply is complete. */
  private endLine(): boolean {
    const n = this.negative ? -this.number : this.number;
    switch (this.header) {
      case H_NULL:
        return this.nullElement();
      case H_BULK:
        if (this.digits === 0 || n > REPLY_LENGTH_MAX) throw new ReplyProtocolError('a bad bulk length');
        if (n < 0) return this.nullElement();
        this.state = S_BODY;
        this.bodyLeft = n + 2;
        return false;
      case H_AGGREGATE: {
        if (this.digits === 0 || n > REPLY_LENGTH_MAX) throw new ReplyProtocolError('a bad element count');
        if (n < 0) return this.nullElement();
        if (n === 0) return this.elementDone();
        if (this.depth === REPLY_DEPTH_MAX) throw new ReplyProtocolError('replies nested too deep');
        const pairs = this.typeByte === 0x25 || this.typeByte === 0x7c;
        // An attribute (|) is followed by the element it describes: one more to read.
        this.left[this.depth++] = pairs ? 2 * n + (this.typeByte === 0x7c ? 1 : 0) : n;
        this.state = S_TYPE;
        return false;
      }
      default:
        return this.elementDone();
    }
  }

  private nullElement(): boolean {
    if (this.depth === 0) this.status = REPLY_NULL;
    else this.nulls++;
    return this.elementDone();
  }

  /** An element is complete: close the aggregates it completes. True when the reply is complete. */
  private elementDone(): boolean {
    this.state = S_TYPE;
    while (this.depth > 0) {
      if (--this.left[this.depth - 1] > 0) return false;
      this.depth--;
    }
    return true;
  }
}
