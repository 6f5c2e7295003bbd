// A tool program as authors write it, typechecked against tally.d.ts by `npm run typecheck`.

/** @param {TallyEvent<{ account_id: string, reason: string, fee?: string }>} event */
function run(event) {
  const data = event.data;
  graphql('mutation Lock($id: UUID!) { updateAccount(id: $id, input: {status: LOCKED}) { accountId } }', {
    id: data.account_id,
  });
  /** @type {ToolResult<{ case_id: string }>} */
  const opened = tools.open_case({ account_id: data.account_id, note: data.reason }, { check: false });
  const fee = decimal(data.fee ?? '0').round(2, 'half_even');
  if (fee.isNegative()) fail('fee must not be negative', 'send a fee of 0 or more', { retry: false });
  console.log('locked', data.account_id, 'fee', fee);
  return { locked: true, case_opened: opened.ok, fee: money(fee, 'USD') };
}
